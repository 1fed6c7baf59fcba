// Issue 23: `Idempotency-Key` on the other POSTs (restore, rotate-secret, portal sessions). Their key
// claims the request and keeps its first answer, sealed under the master key (it may hold a new signing
// secret or a portal link), so a retry within 24 hours gets it again; such a claim has no endpoint id.
import { Migration } from '@mikro-orm/migrations';

export class Migration0010IdempotentAnswers extends Migration {
  override up(): void {
    this.addSql('alter table idempotency_keys alter column endpoint_id drop not null');
    this.addSql('alter table idempotency_keys add column if not exists answer text null');
  }

  override down(): void {
    this.addSql('delete from idempotency_keys where endpoint_id is null');
    this.addSql('alter table idempotency_keys drop column if exists answer');
    this.addSql('alter table idempotency_keys alter column endpoint_id set not null');
  }
}
