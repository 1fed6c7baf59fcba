// Reading one subject's messages of a stream without a consumer: one direct get each, by subject.
import { JetStreamApiCodes, type JetStreamManager, type StoredMsg } from '@nats-io/jetstream';
import { isApiError } from '../../streams/ensure.ts';

/** The messages of one subject (or wildcard), oldest first, from `from` up to `upTo`. */
export async function* messagesOf(jsm: JetStreamManager, stream: string, subject: string, from = 1, upTo = Number.MAX_SAFE_INTEGER): AsyncGenerator<StoredMsg> {
  for (let seq = from; seq <= upTo;) {
    const m = await jsm.streams.getMessage(stream, { next_by_subj: subject, seq } as never).catch((e: unknown) => {
      if (isApiError(e, JetStreamApiCodes.NoMessageFound) || isApiError(e, JetStreamApiCodes.StreamNotFound)) return null;
      throw e;
    });
    if (!m || m.seq > upTo) return;
    yield m;
    seq = m.seq + 1;
  }
}
