// The delivery log's rates (src/deliverylog/rates.ts): attempts per endpoint per minute, ok and failed, added
// to by the attempt-log projection with each batch, so a day's chart or an hour's success ratio reads at
// most 1,440 rows an endpoint, whatever the delivery rate. The row of endpoint '' counts every endpoint.
import { Migration } from '@mikro-orm/migrations';

export class Migration0018AttemptRates extends Migration {
  override up(): void {
    this.addSql(`create table if not exists attempt_rates (
      endpoint_id text not null,
      minute timestamptz not null,
      tenant text not null,
      ok int not null,
      failed int not null,
      primary key (endpoint_id, minute))`);
    this.addSql('create index if not exists attempt_rates_minute on attempt_rates (minute)');
    // An endpoint's last error without walking its successes (failures are few).
    this.addSql("create index if not exists attempt_log_failures on attempt_log (endpoint_id, at) where outcome <> 'ok'");
  }

  override down(): void {
    this.addSql('drop table if exists attempt_rates');
    this.addSql('drop index if exists attempt_log_failures');
  }
}
