// Whether the standard OTEL_* variables ask for traces. Off by default: with none of them set the SDK is
// never loaded, and the delivery path pays one boolean test per event and per attempt (tracing.ts).
export type Env = Record<string, string | undefined>;

/**
 * True when traces are to be exported: an OTLP endpoint is named (OTEL_EXPORTER_OTLP_ENDPOINT or its
 * _TRACES_ form), or OTEL_TRACES_EXPORTER names an exporter other than `none`; never with OTEL_SDK_DISABLED=true.
 */
export function tracingRequested(env: Env): boolean {
  if (env['OTEL_SDK_DISABLED']?.trim().toLowerCase() === 'true') return false;
  const exporters = env['OTEL_TRACES_EXPORTER']?.split(',').map((s) => s.trim().toLowerCase()).filter(Boolean);
  if (exporters?.length) return exporters.some((e) => e !== 'none');
  return Boolean(env['OTEL_EXPORTER_OTLP_ENDPOINT']?.trim() || env['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT']?.trim());
}
