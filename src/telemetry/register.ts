// Loaded before the service with `node --import` (npm start, bin/hookstream): the instrumentations of
// node:http, Koa and pg patch those modules as they are imported, which under ESM needs the loader hook
// registered before the first import. Without the OTEL_* variables that ask for traces nothing else is
// loaded (config.ts).
import { tracingRequested } from './config.ts';

if (tracingRequested(process.env)) await import('./sdk.ts');
