// The operators' delivery log (src/deliverylog/store.ts): every attempt, and each delivery's latest state,
// folded from ATTEMPT_LOG by the attempt-log projection. Indexes serve the searches (newest first, by
// tenant, endpoint or webhook-id), the endpoints' rates and the retention sweep.
import { Migration } from '@mikro-orm/migrations';

export class Migration0017DeliveryLog extends Migration {
  override up(): void {
    this.addSql(`create table if not exists attempt_log (
      tenant text not null,
      endpoint_id text not null,
      webhook_id text not null,
      event_type text not null,
      attempt int not null,
      at timestamptz not null,
      duration_ms int not null,
      status_code int null,
      outcome text not null,
      error_class text null,
      error text null,
      response_body text null,
      next_attempt_at timestamptz null)`);
    this.addSql('create index if not exists attempt_log_webhook on attempt_log (webhook_id)');
    this.addSql('create index if not exists attempt_log_endpoint_at on attempt_log (endpoint_id, at)');
    this.addSql('create index if not exists attempt_log_at on attempt_log (at)');
    this.addSql(`create table if not exists delivery_log (
      webhook_id text not null,
      endpoint_id text not null,
      tenant text not null,
      event_type text not null,
      first_at timestamptz not null,
      last_at timestamptz not null,
      attempts int not null,
      last_attempt int not null,
      outcome text not null,
      status_code int null,
      duration_ms int not null,
      error text null,
      next_attempt_at timestamptz null,
      primary key (webhook_id, endpoint_id))`);
    this.addSql('create index if not exists delivery_log_last_at on delivery_log (last_at)');
    this.addSql('create index if not exists delivery_log_tenant_last_at on delivery_log (tenant, last_at)');
    this.addSql('create index if not exists delivery_log_endpoint_last_at on delivery_log (endpoint_id, last_at)');
  }

  override down(): void {
    this.addSql('drop table if exists attempt_log');
    this.addSql('drop table if exists delivery_log');
  }
}
