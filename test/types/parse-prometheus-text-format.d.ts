// The parser the metrics test reads /metrics with ships no types: what the test uses of it.
declare module 'parse-prometheus-text-format' {
  interface Metric { value?: string, labels?: Record<string, string>, buckets?: Record<string, string>, count?: string, sum?: string }
  interface MetricFamily { name: string, help: string, type: 'COUNTER' | 'GAUGE' | 'HISTOGRAM' | 'SUMMARY' | 'UNTYPED', metrics: Metric[] }
  export default function parsePrometheusTextFormat (text: string): MetricFamily[]
}
