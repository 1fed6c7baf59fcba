// Per-tenant quotas (src/tenants/limits.ts): one row per tenant whose limits an operator overrode (and
// `*` for the defaults); a null column is that limit's default.
import { Migration } from '@mikro-orm/migrations';

export class Migration0016TenantLimits extends Migration {
  override up(): void {
    this.addSql(`
      create table if not exists tenant_limits (
        tenant text primary key,
        endpoints integer null,
        writes_per_second integer null,
        queued_deliveries integer null,
        events_per_second integer null,
        updated_at timestamptz not null,
        updated_by text not null
      )`);
  }

  override down(): void {
    this.addSql('drop table if exists tenant_limits');
  }
}
