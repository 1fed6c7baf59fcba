// Issue 11: an endpoint's signature scheme, and for v1a its public key, in the projection so that every
// read shows them. Existing rows are v1 endpoints (the default); the private keys stay in the stream.
import { Migration } from '@mikro-orm/migrations';

export class Migration0002SignatureScheme extends Migration {
  override up(): void {
    this.addSql(`
      alter table endpoints
        add column signature_scheme text not null default 'v1',
        add column signing_public_key text null,
        add constraint endpoints_signature_scheme_check check (signature_scheme in ('v1', 'v1a'))`);
  }

  override down(): void {
    this.addSql(`
      alter table endpoints
        drop constraint if exists endpoints_signature_scheme_check,
        drop column if exists signing_public_key,
        drop column if exists signature_scheme`);
  }
}
