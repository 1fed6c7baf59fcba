// Issue 23: each dead letter's authentication tag (src/deadletter/tag.ts), under a key Postgres never holds.
// Null for rows stored before it: a replay refuses them until `hookstream keys reseal-dead-letters` tags them.
import { Migration } from '@mikro-orm/migrations';

export class Migration0008DeadLetterTag extends Migration {
  override up(): void {
    this.addSql('alter table dead_letters add column if not exists tag bytea null');
  }

  override down(): void {
    this.addSql('alter table dead_letters drop column if exists tag');
  }
}
