// Where each replay of a dead letter was published ([stream, seq] pairs): erasing the dead letter's subject
// deletes its replays still queued or waiting for a retry, so none is delivered after the erasure.
import { Migration } from '@mikro-orm/migrations';

export class Migration0015DeadLetterReplays extends Migration {
  override up(): void {
    this.addSql(`alter table dead_letters add column if not exists replayed_to jsonb not null default '[]'::jsonb`);
  }

  override down(): void {
    this.addSql('alter table dead_letters drop column if exists replayed_to');
  }
}
