// Every migration, in order. Listed in code rather than discovered on disk, so the migrator needs no
// file globbing or dynamic import and works the same under Node's type stripping and in any bundle.
// The name is what mikro_orm_migrations records: never rename a released one.
import type { MigrationObject } from '@mikro-orm/core';
import { Migration0001Initial } from './0001-initial.ts';
import { Migration0002SignatureScheme } from './0002-signature-scheme.ts';
import { Migration0003RateLimitAndDisabled } from './0003-rate-limit-and-disabled.ts';
import { Migration0004DeadLetterSource } from './0004-dead-letter-source.ts';
import { Migration0005ProjectionSkips } from './0005-projection-skips.ts';
import { Migration0006IdempotencyKeys } from './0006-idempotency-keys.ts';
import { Migration0007OperatorsAndAudit } from './0007-operators-and-audit.ts';
import { Migration0009PortalSessions } from './0009-portal-sessions.ts';
import { Migration0008DeadLetterTag } from './0008-dead-letter-tag.ts';
import { Migration0010IdempotentAnswers } from './0010-idempotent-answers.ts';
import { Migration0011EndpointOrdering } from './0011-endpoint-ordering.ts';
import { Migration0012DeadLetterSubjects } from './0012-dead-letter-subjects.ts';
import { Migration0013DeadLetterTrace } from './0013-dead-letter-trace.ts';
import { Migration0014ErasureIndex } from './0014-erasure-index.ts';
import { Migration0015DeadLetterReplays } from './0015-dead-letter-replays.ts';
import { Migration0016TenantLimits } from './0016-tenant-limits.ts';
import { Migration0017DeliveryLog } from './0017-delivery-log.ts';
import { Migration0018AttemptRates } from './0018-attempt-rates.ts';
import { Migration0019OperatorDisabled } from './0019-operator-disabled.ts';

export const MIGRATIONS: MigrationObject[] = [
  { name: '0001-initial', class: Migration0001Initial },
  { name: '0002-signature-scheme', class: Migration0002SignatureScheme },
  { name: '0003-rate-limit-and-disabled', class: Migration0003RateLimitAndDisabled },
  { name: '0004-dead-letter-source', class: Migration0004DeadLetterSource },
  { name: '0005-projection-skips', class: Migration0005ProjectionSkips },
  { name: '0006-idempotency-keys', class: Migration0006IdempotencyKeys },
  { name: '0007-operators-and-audit', class: Migration0007OperatorsAndAudit },
  { name: '0008-dead-letter-tag', class: Migration0008DeadLetterTag },
  { name: '0009-portal-sessions', class: Migration0009PortalSessions },
  { name: '0010-idempotent-answers', class: Migration0010IdempotentAnswers },
  { name: '0011-endpoint-ordering', class: Migration0011EndpointOrdering },
  { name: '0012-dead-letter-subjects', class: Migration0012DeadLetterSubjects },
  { name: '0013-dead-letter-trace', class: Migration0013DeadLetterTrace },
  { name: '0014-erasure-index', class: Migration0014ErasureIndex },
  { name: '0015-dead-letter-replays', class: Migration0015DeadLetterReplays },
  { name: '0016-tenant-limits', class: Migration0016TenantLimits },
  { name: '0017-delivery-log', class: Migration0017DeliveryLog },
  { name: '0018-attempt-rates', class: Migration0018AttemptRates },
  { name: '0019-operator-disabled', class: Migration0019OperatorDisabled },
];
