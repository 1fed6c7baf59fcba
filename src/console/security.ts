// What every console response carries, and what every form post must show: headers that forbid framing,
// inline script and sniffing; session cookies that are HttpOnly, SameSite=Strict and Secure; and a form
// check that refuses a post from another site (Sec-Fetch-Site, Origin) or without the CSRF token of the
// session (or of the sign-in page's pre-session cookie).
import type { Context } from 'koa';
import { csrfMatches } from './sessions.ts';

export const CONTENT_SECURITY_POLICY = [
  "default-src 'none'", "script-src 'self'", "style-src 'self'", "img-src 'self' data:", "font-src 'self'",
  "form-action 'self'", "frame-ancestors 'none'", "base-uri 'none'",
].join('; ');

export function setSecurityHeaders(ctx: Context): void {
  ctx.set('Content-Security-Policy', CONTENT_SECURITY_POLICY);
  ctx.set('X-Frame-Options', 'DENY');
  ctx.set('X-Content-Type-Options', 'nosniff');
  // Page URLs carry tenant ids and webhook ids: no other site sees them. (no-referrer would make the
  // browser send `Origin: null` on the console's own form posts, which the form check refuses.)
  ctx.set('Referrer-Policy', 'same-origin');
  ctx.set('Cross-Origin-Opener-Policy', 'same-origin');
  ctx.set('Cross-Origin-Resource-Policy', 'same-origin');
  ctx.set('Permissions-Policy', 'camera=(), microphone=(), geolocation=(), clipboard-read=()');
}

export const SESSION_COOKIE = 'hs_console_session';
/** Holds the secret of the sign-in form's CSRF token until a session exists. */
export const PRE_SESSION_COOKIE = 'hs_console_pre';

/**
 * A cookie the page's scripts cannot read (HttpOnly), that no other site's request carries (SameSite=Strict),
 * sent only over TLS or to loopback (Secure: browsers count http://127.0.0.1 and localhost as secure).
 */
export function setCookie(ctx: Context, name: string, value: string, maxAgeSeconds: number): void {
  ctx.append('Set-Cookie', `${name}=${value}; Path=/; Max-Age=${maxAgeSeconds}; HttpOnly; SameSite=Strict; Secure`);
}

export const clearCookie = (ctx: Context, name: string): void => setCookie(ctx, name, '', 0);

export function readCookie(ctx: Context, name: string): string | undefined {
  for (const part of (ctx.get('Cookie') || '').split(';')) {
    const i = part.indexOf('=');
    if (i > 0 && part.slice(0, i).trim() === name) return part.slice(i + 1).trim();
  }
  return undefined;
}

/** Why a form post is refused, or undefined when it came from a console page of this session. */
export function formRefusal(ctx: Context, secret: string | undefined, token: unknown): string | undefined {
  const site = ctx.get('Sec-Fetch-Site');
  if (site && site !== 'same-origin') return `a form post from another site (${site})`;
  const origin = ctx.get('Origin');
  if (origin && origin !== 'null') {
    let host: string;
    try { host = new URL(origin).host; } catch { return 'a malformed Origin'; }
    if (host !== ctx.host) return 'a form post from another origin';
  } else if (origin === 'null') {
    return 'a form post from an opaque origin';
  }
  if (!secret || !csrfMatches(secret, token)) return 'a form without this session\'s CSRF token';
  return undefined;
}

const FORM_LIMIT = 16 * 1024;

/** An application/x-www-form-urlencoded body of at most 16 KB; anything else is refused. */
export async function readForm(ctx: Context): Promise<URLSearchParams> {
  if (!ctx.is('application/x-www-form-urlencoded')) ctx.throw(415, 'forms only');
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of ctx.req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > FORM_LIMIT) ctx.throw(413, 'form too large');
    chunks.push(chunk);
  }
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}
