// Issue 23: `Idempotency-Key` on POST /v1/webhooks. A key claims the endpoint id its create will use, so a
// retried create (its first answer lost to a timeout) finds the same endpoint and answers it, secret
// included. Kept 24 hours; the secret is never stored here (it is read back, sealed, from ENDPOINTS).
import { Migration } from '@mikro-orm/migrations';

export class Migration0006IdempotencyKeys extends Migration {
  override up(): void {
    this.addSql(`
      create table if not exists idempotency_keys (
        tenant text not null,
        key text not null,
        request_hash text not null,
        endpoint_id text not null,
        created_at timestamptz not null,
        primary key (tenant, key)
      )`);
    this.addSql('create index if not exists idempotency_keys_created_at_idx on idempotency_keys (created_at)');
  }

  override down(): void {
    this.addSql('drop table if exists idempotency_keys');
  }
}
