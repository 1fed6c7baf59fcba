// Issue 10: an endpoint's rate limit, and the `disabled` state with its reason and time, in the
// projection so that every read shows them. Existing rows have no limit and are not disabled.
import { Migration } from '@mikro-orm/migrations';

export class Migration0003RateLimitAndDisabled extends Migration {
  override up(): void {
    this.addSql(`
      alter table endpoints
        add column rate_limit integer null,
        add column disabled_reason text null,
        add column disabled_at timestamptz null,
        drop constraint if exists endpoints_status_check,
        add constraint endpoints_status_check check (status in ('active', 'disabled', 'deleted')),
        add constraint endpoints_disabled_reason_check check (disabled_reason in ('gone', 'failing'))`);
  }

  override down(): void {
    this.addSql(`
      alter table endpoints
        drop constraint if exists endpoints_disabled_reason_check,
        drop constraint if exists endpoints_status_check,
        drop column if exists disabled_at,
        drop column if exists disabled_reason,
        drop column if exists rate_limit`);
    this.addSql(`update endpoints set status = 'deleted' where status = 'disabled'`);
    this.addSql(`alter table endpoints add constraint endpoints_status_check check (status in ('active', 'deleted'))`);
  }
}
