// Issue 20: the trace id of the delivery that died (from its traceparent), so an operator goes from a
// dead letter to its trace without opening the sealed message. Null when the delivery carried no trace.
import { Migration } from '@mikro-orm/migrations';

export class Migration0013DeadLetterTrace extends Migration {
  override up(): void {
    this.addSql('alter table dead_letters add column if not exists trace_id text null');
  }

  override down(): void {
    this.addSql('alter table dead_letters drop column if exists trace_id');
  }
}
