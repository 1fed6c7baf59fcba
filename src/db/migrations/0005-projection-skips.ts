// Issue 23: events a projector skipped (undecodable, unusable, or refused by Postgres), by sequence and
// with the reason, so that one tenant's poison event is visible (`hookstream projections status`) rather
// than holding the read model for every tenant.
import { Migration } from '@mikro-orm/migrations';

export class Migration0005ProjectionSkips extends Migration {
  override up(): void {
    this.addSql(`
      create table if not exists projection_skips (
        name text not null,
        seq bigint not null,
        reason text not null,
        skipped_at timestamptz not null,
        primary key (name, seq)
      )`);
  }

  override down(): void {
    this.addSql('drop table if exists projection_skips');
  }
}
