// Issue 22: the keyed hashes of the subject ids (user, organization) a dead letter's sealed message
// carries (src/erasure/subject-hash.ts), so erasing a user finds their dead letters without opening any.
// Null on rows stored before: erasure opens those of the tenant to look (README, "Erasing a user's data").
import { Migration } from '@mikro-orm/migrations';

export class Migration0012DeadLetterSubjects extends Migration {
  override up(): void {
    this.addSql('alter table dead_letters add column if not exists subject_hashes text[] null');
    this.addSql('create index if not exists dead_letters_subject_hashes on dead_letters using gin (subject_hashes)');
  }

  override down(): void {
    this.addSql('drop index if exists dead_letters_subject_hashes');
    this.addSql('alter table dead_letters drop column if exists subject_hashes');
  }
}
