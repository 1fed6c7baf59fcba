// Issue 21: an endpoint's ordering (`none` or `key`) in the projection so that every read shows it.
// Existing rows deliver unordered, as before (the default).
import { Migration } from '@mikro-orm/migrations';

export class Migration0011EndpointOrdering extends Migration {
  override up(): void {
    this.addSql(`
      alter table endpoints
        add column ordering text not null default 'none',
        add constraint endpoints_ordering_check check (ordering in ('none', 'key'))`);
  }

  override down(): void {
    this.addSql(`
      alter table endpoints
        drop constraint if exists endpoints_ordering_check,
        drop column if exists ordering`);
  }
}
