// The console's and the portal's one escaping template (issue 19): every interpolated value is text, only
// what the template itself built is markup; query strings are encoded.
import test from 'ava';
import { escapeHtml, href, html, toString } from '../src/console/html.ts';

const ATTACK = `<script>alert(1)</script><img src=x onerror="alert('x')">&amp;`;

test('interpolated strings are escaped in text and in attributes', (t) => {
  t.is(escapeHtml(ATTACK), '&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=&quot;alert(&#39;x&#39;)&quot;&gt;&amp;amp;');
  const out = toString(html`<p title="${ATTACK}">${ATTACK}</p>`);
  t.false(out.includes('<script>'));
  t.false(out.includes('<img'));
  t.false(/title="[^"]*"[^>]*onerror/.test(out), 'a quote in a value cannot end the attribute');
  t.is(out.match(/</g)!.length, 2, 'only the template\'s own tags');
});

test('arrays and nested templates compose; null, undefined and false render nothing; numbers are text', (t) => {
  const items = ['<a>', 'b'].map((x) => html`<li>${x}</li>`);
  t.is(toString(html`<ul>${items}</ul>${null}${undefined}${false}${0}`), '<ul><li>&lt;a&gt;</li><li>b</li></ul>0');
});

test('a string that looks like a template result is still text', (t) => {
  const forged = { toString: () => '<b>' } as unknown as string;
  t.is(toString(html`${forged}`), '&lt;b&gt;');
  t.is(toString(html`${JSON.parse('{"__html":"<b>"}') as string}`), '[object Object]');
});

test('href encodes query values and leaves out empty ones', (t) => {
  t.is(href('/dead-letters', { tenant: 'a&b=c', endpoint: '', since: undefined, n: 2 }), '/dead-letters?tenant=a%26b%3Dc&n=2');
  t.is(href('/audit'), '/audit');
});
