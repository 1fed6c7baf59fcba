// Every CLI command, in the order `hookstream --help` lists them.
import type { Command } from '../command.ts';
import { serve } from './serve.ts';
import {
  endpointsCreate, endpointsDelete, endpointsDisable, endpointsEnable, endpointsHealth, endpointsList, endpointsRetryNow, endpointsUpdate,
} from './endpoints.ts';
import { eventsPublish, eventsRejected, eventsTrace } from './events.ts';
import { keysGenerate, keysResealDeadLetters, keysResealSecrets } from './keys.ts';
import { listen } from './listen.ts';
import { apiKeysCreate, apiKeysList, apiKeysRevoke } from './api-keys.ts';
import { deadLettersList, deadLettersReplay, deadLettersShow } from './dead-letters.ts';
import { deliveriesList, deliveriesShow } from './deliveries.ts';
import { projectionsRebuild, projectionsStatus } from './projections.ts';
import { operatorsCreate, operatorsList, operatorsRevoke } from './operators.ts';
import { auditList } from './audit.ts';
import { erase } from './erase.ts';
import { backup, restore } from './backup.ts';
import { tenantsLimitsSet, tenantsLimitsShow } from './tenants.ts';

export const COMMANDS: Command[] = [serve, apiKeysCreate, apiKeysList, apiKeysRevoke, endpointsCreate, endpointsUpdate, endpointsList, endpointsHealth, endpointsRetryNow,
  endpointsDisable, endpointsEnable, endpointsDelete, eventsPublish, eventsRejected, eventsTrace, listen,
  deadLettersList, deadLettersShow, deadLettersReplay, deliveriesList, deliveriesShow, erase, operatorsCreate, operatorsList, operatorsRevoke, tenantsLimitsShow, tenantsLimitsSet, auditList, projectionsStatus, projectionsRebuild, keysGenerate,
  keysResealSecrets, keysResealDeadLetters, backup, restore];
