// A small client for the management API in tests, and a check of every response against the OpenAPI
// document (status documented for the operation, body matching its schema), so the document stays true.
import type { ExecutionContext } from 'ava';
import { OPENAPI_DOCUMENT } from '../../src/api/openapi.ts';

export interface ApiResponse {
  status: number;
  headers: Headers;
  /** Parsed JSON when the body is JSON, else the text. */
  body: any;
  text: string;
}

export interface RequestOptions {
  /** A value to send as JSON. */
  json?: unknown;
  /** A raw body, sent as is (set content-type in headers yourself). */
  raw?: string | Uint8Array;
  headers?: Record<string, string>;
  /** Send no Authorization header. */
  anonymous?: boolean;
}

export interface ApiClient {
  request(method: string, path: string, opts?: RequestOptions): Promise<ApiResponse>;
  get(path: string, opts?: RequestOptions): Promise<ApiResponse>;
  post(path: string, json?: unknown, opts?: RequestOptions): Promise<ApiResponse>;
  patch(path: string, json?: unknown, opts?: RequestOptions): Promise<ApiResponse>;
  delete(path: string, opts?: RequestOptions): Promise<ApiResponse>;
}

/** A client for `baseUrl` with `key`; with `t`, every response that the document does not describe fails the test. */
export function apiClient(baseUrl: string, key: string | undefined, t?: ExecutionContext): ApiClient {
  const request = async (method: string, path: string, opts: RequestOptions = {}): Promise<ApiResponse> => {
    const headers: Record<string, string> = {};
    if (key && !opts.anonymous) headers['authorization'] = `Bearer ${key}`;
    let body: string | Uint8Array | undefined;
    if (opts.json !== undefined) {
      headers['content-type'] = 'application/json';
      body = JSON.stringify(opts.json);
    } else if (opts.raw !== undefined) body = opts.raw;
    Object.assign(headers, opts.headers);
    const res = await fetch(baseUrl + path, { method, headers, body });
    const text = await res.text();
    let parsed: unknown = text;
    if (text !== '' && (res.headers.get('content-type') ?? '').includes('application/json')) parsed = JSON.parse(text);
    const out: ApiResponse = { status: res.status, headers: res.headers, body: parsed, text };
    if (t) {
      const problems = checkResponse(method, path, out);
      if (problems.length) t.fail(`${method} ${path} → ${out.status} does not match the OpenAPI document: ${problems.join('; ')}`);
    }
    return out;
  };
  return {
    request,
    get: (path, opts) => request('GET', path, opts),
    post: (path, json, opts) => request('POST', path, { ...opts, json }),
    patch: (path, json, opts) => request('PATCH', path, { ...opts, json }),
    delete: (path, opts) => request('DELETE', path, opts),
  };
}

// ---- the document check ----

type Schema = Record<string, any>;
const doc = OPENAPI_DOCUMENT as unknown as Schema;

function resolve(node: Schema): Schema {
  let n = node;
  while (typeof n['$ref'] === 'string') {
    const parts = (n['$ref'] as string).replace(/^#\//, '').split('/');
    n = parts.reduce<Schema>((o, k) => o[k], doc);
  }
  return n;
}

const typeOf = (v: unknown): string =>
  v === null ? 'null' : Array.isArray(v) ? 'array' : Number.isInteger(v) ? 'integer' : typeof v;

/** Problems of `value` against the JSON Schema subset the document uses. */
export function schemaProblems(schemaIn: Schema, value: unknown, at = '$'): string[] {
  const schema = resolve(schemaIn);
  const problems: string[] = [];
  if (Array.isArray(schema['oneOf'])) {
    const matching = schema['oneOf'].filter((s: Schema) => schemaProblems(s, value, at).length === 0).length;
    if (matching !== 1) problems.push(`${at}: matches ${matching} of the oneOf schemas, not exactly one`);
  }
  if (schema['type'] !== undefined) {
    const types: string[] = Array.isArray(schema['type']) ? schema['type'] : [schema['type']];
    const actual = typeOf(value);
    const ok = types.some((ty) => ty === actual || (ty === 'number' && actual === 'integer'));
    if (!ok) return [`${at}: expected ${types.join('|')}, got ${actual}`];
  }
  if (Array.isArray(schema['enum']) && !schema['enum'].includes(value)) problems.push(`${at}: ${JSON.stringify(value)} not in enum`);
  if (typeof value === 'string') {
    if (schema['pattern'] && !new RegExp(schema['pattern']).test(value)) problems.push(`${at}: does not match ${schema['pattern']}`);
    if (schema['maxLength'] !== undefined && value.length > schema['maxLength']) problems.push(`${at}: longer than ${schema['maxLength']}`);
    if (schema['format'] === 'date-time' && !Number.isFinite(Date.parse(value))) problems.push(`${at}: not a date-time`);
  }
  if (typeof value === 'number') {
    if (schema['minimum'] !== undefined && value < schema['minimum']) problems.push(`${at}: below ${schema['minimum']}`);
    if (schema['maximum'] !== undefined && value > schema['maximum']) problems.push(`${at}: above ${schema['maximum']}`);
  }
  if (Array.isArray(value)) {
    if (schema['minItems'] !== undefined && value.length < schema['minItems']) problems.push(`${at}: fewer than ${schema['minItems']} items`);
    if (schema['maxItems'] !== undefined && value.length > schema['maxItems']) problems.push(`${at}: more than ${schema['maxItems']} items`);
    if (schema['items']) value.forEach((item, i) => problems.push(...schemaProblems(schema['items'], item, `${at}[${i}]`)));
  }
  if (typeOf(value) === 'object') {
    const obj = value as Record<string, unknown>;
    const props: Schema = schema['properties'] ?? {};
    for (const name of schema['required'] ?? []) if (!(name in obj)) problems.push(`${at}: missing ${name}`);
    for (const [name, v] of Object.entries(obj)) {
      if (props[name]) problems.push(...schemaProblems(props[name], v, `${at}.${name}`));
      else if (schema['additionalProperties'] === false) problems.push(`${at}: unexpected property ${name}`);
    }
  }
  return problems;
}

/** The document's path template that a concrete path falls under, if any. */
export function templateOf(path: string): string | undefined {
  const bare = path.split('?')[0]!;
  return Object.keys(doc['paths']).find((tpl) =>
    new RegExp(`^${tpl.replace(/[.]/g, '\\.').replace(/\{[^}]+\}/g, '[^/]+')}$`).test(bare));
}

/**
 * Problems of a response against the document. Answers the document cannot describe (no such route,
 * a method the path lacks, a request rejected before routing) are checked for the error envelope only.
 */
export function checkResponse(method: string, path: string, res: ApiResponse): string[] {
  const tpl = templateOf(path);
  const operation: Schema | undefined = tpl ? doc['paths'][tpl][method.toLowerCase()] : undefined;
  if (!res.headers.get('x-request-id')) return ['no x-request-id header'];
  if (!operation) {
    return res.status >= 400 ? schemaProblems({ $ref: '#/components/schemas/Error' }, res.body) : [];
  }
  const documented = operation['responses'][String(res.status)];
  if (!documented) return [`status ${res.status} is not documented`];
  const schema = resolve(documented)['content']?.['application/json']?.['schema'];
  if (!schema) return [];
  return schemaProblems(schema, res.body);
}
