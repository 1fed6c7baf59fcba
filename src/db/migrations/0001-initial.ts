// The first schema: the endpoint projection, projector checkpoints, dead letters and API keys.
// Written by hand (not generated) so that what runs in production is exactly what was reviewed.
import { Migration } from '@mikro-orm/migrations';

export class Migration0001Initial extends Migration {
  override up(): void {
    this.addSql(`
      create table endpoints (
        id text collate "C" primary key,
        tenant text not null,
        url text not null,
        events jsonb not null,
        description text null,
        status text not null check (status in ('active', 'deleted')),
        created_at timestamptz not null,
        updated_at timestamptz not null,
        version bigint not null
      )`);
    this.addSql('create index endpoints_tenant_id_idx on endpoints (tenant, id desc)');

    this.addSql(`
      create table projection_checkpoints (
        name text primary key,
        last_seq bigint not null
      )`);

    this.addSql(`
      create table dead_letters (
        id text primary key,
        endpoint_id text not null,
        tenant text not null,
        webhook_id text not null,
        event_type text not null,
        attempts integer not null,
        last_status integer null,
        last_error text null,
        failed_at timestamptz not null,
        sealed bytea not null,
        source_stream text not null,
        source_seq bigint not null,
        created_at timestamptz not null,
        dead_count integer not null default 1,
        replay_count integer not null default 0,
        last_replayed_at timestamptz null,
        status text not null default 'dead' check (status in ('dead', 'replayed')),
        constraint dead_letters_endpoint_webhook_key unique (endpoint_id, webhook_id)
      )`);
    this.addSql('create index dead_letters_tenant_idx on dead_letters (tenant, failed_at desc)');
    this.addSql('create index dead_letters_endpoint_idx on dead_letters (endpoint_id, failed_at desc)');
    this.addSql('create index dead_letters_event_idx on dead_letters (event_type, failed_at desc)');
    this.addSql('create index dead_letters_failed_at_idx on dead_letters (failed_at desc)');

    this.addSql(`
      create table api_keys (
        id text primary key,
        tenant text not null,
        name text null,
        hash bytea not null,
        prefix text not null,
        created_at timestamptz not null,
        revoked_at timestamptz null,
        constraint api_keys_hash_key unique (hash)
      )`);
    this.addSql('create index api_keys_tenant_idx on api_keys (tenant, created_at)');
  }

  override down(): void {
    this.addSql('drop table if exists api_keys');
    this.addSql('drop table if exists dead_letters');
    this.addSql('drop table if exists projection_checkpoints');
    this.addSql('drop table if exists endpoints');
  }
}
