// Issue 19: operators have their own identity (a key kept only as its sha256, as API keys are), the
// console's sessions belong to one of them, and every operator action is written to the audit log.
import { Migration } from '@mikro-orm/migrations';

export class Migration0007OperatorsAndAudit extends Migration {
  override up(): void {
    this.addSql(`
      create table if not exists operators (
        id text primary key,
        name text not null,
        hash bytea not null,
        prefix text not null,
        created_at timestamptz not null,
        revoked_at timestamptz null,
        constraint operators_name_key unique (name),
        constraint operators_hash_key unique (hash)
      )`);
    this.addSql(`
      create table if not exists console_sessions (
        token_hash text primary key,
        operator_id text not null,
        created_at timestamptz not null,
        expires_at timestamptz not null
      )`);
    this.addSql('create index if not exists console_sessions_expires_at_idx on console_sessions (expires_at)');
    this.addSql(`
      create table if not exists audit_log (
        id text collate "C" primary key,
        at timestamptz not null,
        operator text not null,
        action text not null,
        target text not null,
        outcome text not null,
        detail text null
      )`);
    this.addSql('create index if not exists audit_log_operator_idx on audit_log (operator, id)');
  }

  override down(): void {
    this.addSql('drop table if exists audit_log');
    this.addSql('drop table if exists console_sessions');
    this.addSql('drop table if exists operators');
  }
}
