// Issue 19: the tenant portal. A link (`POST /v1/portal/sessions`) is a single-use token that expires in
// minutes; redeeming it makes a session. Both are rows here, kept only as the sha256 of their token.
import { Migration } from '@mikro-orm/migrations';

export class Migration0009PortalSessions extends Migration {
  override up(): void {
    this.addSql(`
      create table if not exists portal_sessions (
        token_hash text primary key,
        kind text not null,
        tenant text not null,
        key_id text not null,
        created_at timestamptz not null,
        expires_at timestamptz not null,
        used_at timestamptz null,
        constraint portal_sessions_kind_check check (kind in ('link', 'session'))
      )`);
    this.addSql('create index if not exists portal_sessions_expires_at_idx on portal_sessions (expires_at)');
  }

  override down(): void {
    this.addSql('drop table if exists portal_sessions');
  }
}
