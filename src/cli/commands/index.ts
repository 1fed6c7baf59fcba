// Every CLI command, in the order `hookstream --help` lists them.
import type { Command } from '../command.ts';
import { serve } from './serve.ts';
import { endpointsCreate } from './endpoints.ts';
import { eventsPublish } from './events.ts';
import { keysGenerate } from './keys.ts';
import { listen } from './listen.ts';

export const COMMANDS: Command[] = [serve, endpointsCreate, eventsPublish, listen, keysGenerate];
