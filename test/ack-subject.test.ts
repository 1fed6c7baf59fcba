// A pulled message's place comes from its ack subject (nats-server 2.9's nine tokens, or 2.10's with a
// domain, an account hash and a random token). The per-consumer reader reads only the numbers of the
// subjects after the first, and must agree with the full parse on every one.
import test from 'ava';
import { ackSubjectReader, parseAckSubject } from '../src/nats/pulled-msg.ts';

const v29 = (delivered: number, seq: number) => `$JS.ACK.DELIVERIES_3.ep_01j.${delivered}.${seq}.${seq + 7}.1764250000000000000.12`;
const v210 = (delivered: number, seq: number) => `$JS.ACK._.ACCHASHABCDEF.DELIVERIES_3.ep_01j.${delivered}.${seq}.${seq + 7}.1764250000000000000.12.Xk3mNq`;

test('both forms are read: stream, consumer, delivery count, stream sequence', (t) => {
  const want = { stream: 'DELIVERIES_3', consumer: 'ep_01j', deliveryCount: 2, streamSequence: 41 };
  t.deepEqual(parseAckSubject(v29(2, 41)), want);
  t.deepEqual(parseAckSubject(v210(2, 41)), want);
  t.is(parseAckSubject('$JS.ACK.too.short'), undefined);
  t.is(parseAckSubject('_INBOX.x.y.z.1.2.3.4.5'), undefined);
  t.is(parseAckSubject('$JS.ACK.S.c.x.2.3.4.5'), undefined, 'not a number');
});

test('the reader agrees with the full parse, subject after subject, in both forms and when the prefix changes', (t) => {
  for (const form of [v29, v210]) {
    const read = ackSubjectReader();
    for (const [delivered, seq] of [[1, 1], [1, 2], [3, 987654321], [12, 5], [1, 9007199254740]] as const) {
      t.deepEqual(read(form(delivered, seq)), parseAckSubject(form(delivered, seq)));
    }
    // Another consumer's subject (never on one feed, but read correctly all the same), then back.
    const other = '$JS.ACK.OTHER.c2.4.77.80.1764250000000000000.0';
    t.deepEqual(read(other), parseAckSubject(other));
    t.deepEqual(read(form(5, 6)), parseAckSubject(form(5, 6)));
    t.is(read(form(5, 6).replace('.5.6.', '.5.x.')), undefined, 'not a number: no place');
  }
});
