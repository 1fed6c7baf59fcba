// When the OTEL_* variables ask for traces (src/telemetry/config.ts), and the traceparent a receiver gets.
import test from 'ava';
import { tracingRequested } from '../src/telemetry/config.ts';
import { spanContextOf } from '../src/telemetry/tracing.ts';

test('tracing is off unless an OTLP endpoint or a traces exporter is named', (t) => {
  t.false(tracingRequested({}));
  t.false(tracingRequested({ OTEL_SERVICE_NAME: 'hookstream', OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' }));
  t.false(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: '  ' }));
  t.true(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }));
  t.true(tracingRequested({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://collector:4318/v1/traces' }));
  t.true(tracingRequested({ OTEL_TRACES_EXPORTER: 'otlp' }));
  t.true(tracingRequested({ OTEL_TRACES_EXPORTER: 'none, zipkin' }));
});

test('OTEL_TRACES_EXPORTER=none and OTEL_SDK_DISABLED=true turn it off even with an endpoint', (t) => {
  t.false(tracingRequested({ OTEL_TRACES_EXPORTER: 'none', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }));
  t.false(tracingRequested({ OTEL_SDK_DISABLED: 'TRUE', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }));
  t.true(tracingRequested({ OTEL_SDK_DISABLED: 'false', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }));
});

test('a traceparent is read only when it is a valid W3C one', (t) => {
  const tp = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
  t.like(spanContextOf(tp), { traceId: '0af7651916cd43dd8448eb211c80319c', spanId: 'b7ad6b7169203331', traceFlags: 1 });
  t.is(spanContextOf(undefined), undefined);
  t.is(spanContextOf('00-00000000000000000000000000000000-b7ad6b7169203331-01'), undefined);
  t.is(spanContextOf('garbage'), undefined);
});
