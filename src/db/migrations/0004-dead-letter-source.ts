// Issue 17: the dead-letter role finds a record by the queued message it was made from (its DELIVERIES
// stream and sequence) when it announces a death whose message is already gone from the queue.
import { Migration } from '@mikro-orm/migrations';

export class Migration0004DeadLetterSource extends Migration {
  override up(): void {
    this.addSql('create index if not exists dead_letters_source_idx on dead_letters (source_stream, source_seq)');
  }

  override down(): void {
    this.addSql('drop index if exists dead_letters_source_idx');
  }
}
