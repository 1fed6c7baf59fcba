// Operators disable endpoints too (the delivery log's endpoint actions): `operator` is a disabled reason.
import { Migration } from '@mikro-orm/migrations';

export class Migration0019OperatorDisabled extends Migration {
  override up(): void {
    this.addSql(`alter table endpoints drop constraint if exists endpoints_disabled_reason_check,
      add constraint endpoints_disabled_reason_check check (disabled_reason in ('gone', 'failing', 'operator'))`);
  }

  override down(): void {
    this.addSql(`update endpoints set disabled_reason = 'failing' where disabled_reason = 'operator'`);
    this.addSql(`alter table endpoints drop constraint if exists endpoints_disabled_reason_check,
      add constraint endpoints_disabled_reason_check check (disabled_reason in ('gone', 'failing'))`);
  }
}
