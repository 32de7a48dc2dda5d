import { formatMs, latencyBars, percent, rate, type AnalyticsSummary, type RuleAnalytics } from '../api';
import { ChartSection, ColumnChart, HBarChart, type Bar } from './charts';

/** "a 3, b 2 and 4 more": the first few of a list, for a chart's spoken summary. */
function listed(items: string[], first = 8): string {
  if (items.length <= first) return items.join(', ');
  return `${items.slice(0, first).join(', ')} and ${items.length - first} more`;
}

export function RuleHitsChart({ rules }: { rules: RuleAnalytics[] }) {
  const bars: Bar[] = rules.map((r) => ({ key: r.rule_id ?? '', label: r.rule_id ?? '', value: r.hit_count ?? 0 }));
  const total = bars.reduce((n, b) => n + b.value, 0);
  const summary = `Rule hits, ${total} in all, by rule: ${listed(bars.map((b) => `${b.label} ${b.value}`))}.`;
  return (
    <ChartSection
      title="Rule hits"
      description="Jobs each rule decided, most first."
      chart={<HBarChart bars={bars} summary={summary} />}
      table={
        <div className="table-wrap">
          <table className="data-table">
            <caption>Rule hits and approvals by rule</caption>
            <thead>
              <tr>
                <th scope="col">Rule</th>
                <th scope="col" className="num">
                  Hits
                </th>
                <th scope="col" className="num">
                  Approvals asked
                </th>
                <th scope="col" className="num">
                  Approved
                </th>
                <th scope="col" className="num">
                  Rejected
                </th>
                <th scope="col" className="num">
                  Average approval latency
                </th>
              </tr>
            </thead>
            <tbody>
              {rules.map((r) => (
                <tr key={r.rule_id}>
                  <th scope="row" className="cell-id">
                    {r.rule_id}
                  </th>
                  <td className="num">{r.hit_count ?? 0}</td>
                  <td className="num">{r.approval_count ?? 0}</td>
                  <td className="num">{r.approved_count ?? 0}</td>
                  <td className="num">{r.rejected_count ?? 0}</td>
                  <td className="num">{r.avg_approval_latency_ms == null ? '—' : formatMs(r.avg_approval_latency_ms)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      }
    />
  );
}

function LatencyChart({ summary }: { summary: AnalyticsSummary }) {
  const bars = latencyBars(summary.approval_latency_histogram);
  const answered = bars.length > 0 ? bars[bars.length - 1].cumulative : 0;
  const columns = bars.map((b, i) => ({
    key: String(b.le_ms ?? 'inf'),
    label: b.le_ms === null ? (i > 0 ? `> ${formatMs(bars[i - 1].le_ms ?? 0)}` : 'any') : `≤ ${formatMs(b.le_ms)}`,
    value: b.count,
  }));
  const text =
    answered === 0
      ? 'Approval latency: no approval was answered in the window.'
      : `Approval latency of ${answered} answered approvals: ${listed(
          bars.map((b) => `${b.label}: ${b.count}`),
          bars.length,
        )}.`;
  return (
    <ChartSection
      title="Approval latency"
      description={
        answered === 0
          ? 'No approval was answered in the window.'
          : `How long people took to answer a gate, from the policy's check to the decision (${answered} answered).`
      }
      chart={<ColumnChart columns={columns} summary={text} />}
      table={
        <div className="table-wrap">
          <table className="data-table">
            <caption>Approval latency histogram</caption>
            <thead>
              <tr>
                <th scope="col">Answered within</th>
                <th scope="col" className="num">
                  Answers in this bucket
                </th>
                <th scope="col" className="num">
                  Answers at or under the bound
                </th>
              </tr>
            </thead>
            <tbody>
              {bars.map((b) => (
                <tr key={String(b.le_ms ?? 'inf')}>
                  <th scope="row">{b.label}</th>
                  <td className="num">{b.count}</td>
                  <td className="num">{b.cumulative}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      }
    />
  );
}

type RateRow = { key: string; name: string; asked: number; overrides: number; overrideRate: number; rejected: number };

function RatesChart({ rules, summary }: { rules: RuleAnalytics[]; summary: AnalyticsSummary }) {
  const rows: RateRow[] = [
    {
      key: '*all*',
      name: 'All rules',
      asked: summary.approvals_asked ?? 0,
      overrides: summary.total_overrides ?? 0,
      overrideRate: summary.override_rate ?? 0,
      rejected: summary.rejected ?? 0,
    },
    ...rules
      .filter((r) => (r.approval_count ?? 0) > 0)
      .map((r) => ({
        key: r.rule_id ?? '',
        name: r.rule_id ?? '',
        asked: r.approval_count ?? 0,
        overrides: r.override_count ?? 0,
        overrideRate: r.override_rate ?? 0,
        rejected: r.rejected_count ?? 0,
      })),
  ];
  const bars: Bar[] = rows.flatMap((row) => {
    const rejection = rate(row.rejected, row.asked);
    return [
      {
        key: `${row.key}-o`,
        label: row.name,
        value: row.overrideRate,
        text: `overrides ${percent(row.overrideRate)} (${row.overrides} of ${row.asked})`,
        series: 'first' as const,
      },
      {
        key: `${row.key}-r`,
        label: '',
        value: rejection,
        text: `rejections ${percent(rejection)} (${row.rejected} of ${row.asked})`,
        series: 'second' as const,
      },
    ];
  });
  const summaryText = `Override and rejection rates of approvals asked: ${listed(
    rows.map(
      (r) => `${r.name} overrides ${percent(r.overrideRate)}, rejections ${percent(rate(r.rejected, r.asked))}`,
    ),
  )}.`;
  return (
    <ChartSection
      title="Override and rejection rates"
      description="Of the approvals a rule asked for: the share people approved (an override of the hold) and the share they rejected."
      chart={<HBarChart bars={bars} summary={summaryText} max={1} />}
      table={
        <div className="table-wrap">
          <table className="data-table">
            <caption>Override and rejection rates by rule</caption>
            <thead>
              <tr>
                <th scope="col">Rule</th>
                <th scope="col" className="num">
                  Approvals asked
                </th>
                <th scope="col" className="num">
                  Overrides
                </th>
                <th scope="col" className="num">
                  Override rate
                </th>
                <th scope="col" className="num">
                  Rejections
                </th>
                <th scope="col" className="num">
                  Rejection rate
                </th>
              </tr>
            </thead>
            <tbody>
              {rows.map((r) => (
                <tr key={r.key}>
                  <th scope="row" className="cell-id">
                    {r.name}
                  </th>
                  <td className="num">{r.asked}</td>
                  <td className="num">{r.overrides}</td>
                  <td className="num">{r.overrideRate}</td>
                  <td className="num">{r.rejected}</td>
                  <td className="num">{+rate(r.rejected, r.asked).toFixed(3)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      }
    />
  );
}

/** The charts of the approvals the rules asked for: latency, and overrides and rejections. */
export function ApprovalCharts({ rules, summary }: { rules: RuleAnalytics[]; summary: AnalyticsSummary }) {
  return (
    <>
      <LatencyChart summary={summary} />
      <RatesChart rules={rules} summary={summary} />
    </>
  );
}
