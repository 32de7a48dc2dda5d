import { describe, expect, it } from 'vitest';

import { buildRunGraph } from './graph';
import type { Layout } from './layout';
import type { Definition, RunDetail } from './types';

// config/workflows/example.json, waiting at its approval gate.
const DEFINITION: Definition = {
  id: 'example-approval',
  name: 'Echo with approval',
  steps: {
    needs_approval: { id: 'needs_approval', name: 'Large amount?', type: 'condition' },
    approve: { id: 'approve', name: 'Approve the echo', type: 'approval', depends_on: ['needs_approval'] },
    wait: { id: 'wait', type: 'delay', depends_on: ['approve'] },
    echo: { id: 'echo', type: 'worker', depends_on: ['wait'] },
  },
};

const RUN: RunDetail = {
  id: 'run-1',
  workflow_id: 'example-approval',
  status: 'waiting',
  steps: {
    needs_approval: { step_id: 'needs_approval', status: 'succeeded', attempts: 1, output: true },
    approve: { step_id: 'approve', status: 'waiting', attempts: 1, job_id: 'run-1:approve@1' },
  },
};

type Graph = ReturnType<typeof buildRunGraph>;

function nodeOf(graph: Graph, id: string) {
  const node = graph.nodes.find((n) => n.id === id);
  if (!node) throw new Error(`no node ${id}`);
  return node;
}

describe('buildRunGraph', () => {
  it('has a node per definition step with the run status, pending where not reached', () => {
    const graph = buildRunGraph(DEFINITION, RUN);
    expect(graph.nodes.map((n) => [n.id, n.data.status])).toEqual([
      ['needs_approval', 'succeeded'],
      ['approve', 'waiting'],
      ['wait', 'pending'],
      ['echo', 'pending'],
    ]);
    expect(nodeOf(graph, 'approve').data).toMatchObject({ kind: 'approval', name: 'Approve the echo', waitingForApproval: true });
    expect(nodeOf(graph, 'needs_approval').data.waitingForApproval).toBe(false);
  });

  it('draws depends_on edges from the dependency to the dependent', () => {
    const graph = buildRunGraph(DEFINITION, RUN);
    expect(graph.edges.map((e) => [e.source, e.target, e.kind])).toEqual([
      ['needs_approval', 'approve', 'depends_on'],
      ['approve', 'wait', 'depends_on'],
      ['wait', 'echo', 'depends_on'],
    ]);
  });

  it('lays the chain out top to bottom with dagre', () => {
    const graph = buildRunGraph(DEFINITION, RUN);
    expect(graph.layout).toBe('layered');
    const ys = graph.nodes.map((n) => n.position.y);
    expect([...ys].sort((a, b) => a - b)).toEqual(ys);
    expect(new Set(ys).size).toBe(4);
  });

  it('puts parallel branches side by side', () => {
    const graph = buildRunGraph(
      {
        steps: {
          prepare: { type: 'transform' },
          left: { depends_on: ['prepare'] },
          right: { depends_on: ['prepare'] },
        },
      },
      { steps: {} },
    );
    expect(nodeOf(graph, 'left').position.y).toBe(nodeOf(graph, 'right').position.y);
    expect(nodeOf(graph, 'left').position.x).not.toBe(nodeOf(graph, 'right').position.x);
    expect(nodeOf(graph, 'left').position.y).toBeGreaterThan(nodeOf(graph, 'prepare').position.y);
  });

  it('falls back to a vertical stack when the layout throws', () => {
    const failing: Layout = () => {
      throw new Error('layout broke');
    };
    const graph = buildRunGraph(DEFINITION, RUN, failing);
    expect(graph.layout).toBe('stack');
    expect(graph.nodes.every((n) => n.position.x === 0)).toBe(true);
    graph.nodes.slice(1).forEach((node, i) => {
      const above = graph.nodes[i];
      expect(node.position.y).toBeGreaterThanOrEqual((above?.position.y ?? 0) + (above?.height ?? 0));
    });
  });

  it('falls back to a vertical stack when the layout leaves a node unplaced', () => {
    const partial: Layout = (nodes) => new Map(nodes.slice(0, 1).map((n) => [n.id, { x: 5, y: 5 }]));
    expect(buildRunGraph(DEFINITION, RUN, partial).layout).toBe('stack');
    const nan: Layout = (nodes) => new Map(nodes.map((n) => [n.id, { x: Number.NaN, y: 0 }]));
    expect(buildRunGraph(DEFINITION, RUN, nan).layout).toBe('stack');
  });

  it('summarises for_each children on their step, in item order', () => {
    const graph = buildRunGraph(
      {
        steps: {
          prepare: { type: 'transform' },
          fan: { type: 'worker', depends_on: ['prepare'], for_each: 'input.items' },
        },
      },
      {
        steps: {
          prepare: { status: 'succeeded' },
          fan: {
            status: 'running',
            resolved_items: ['a', 'b', 'c', 'd'],
            children: {
              'fan[10]': { status: 'running' },
              'fan[0]': { status: 'succeeded' },
              'fan[1]': { status: 'succeeded' },
              'fan[2]': { status: 'waiting' },
            },
          },
        },
      },
    );
    const fan = nodeOf(graph, 'fan').data;
    expect(fan.forEach).toBe(true);
    expect(fan.status).toBe('running');
    expect(fan.children).toEqual({
      total: 4,
      counts: [
        { status: 'succeeded', count: 2 },
        { status: 'waiting', count: 1 },
        { status: 'running', count: 1 },
      ],
      waitingForApproval: 1,
    });
    expect(fan.childrenText).toBe('4 items: 2 succeeded, 1 waiting, 1 running');
    expect(fan.waitingForApproval).toBe(true);
    expect(nodeOf(graph, 'prepare').data.children).toBeNull();
  });

  it('counts an empty for_each as zero items', () => {
    const graph = buildRunGraph(
      { steps: { fan: { for_each: 'input.items' } } },
      { steps: { fan: { status: 'succeeded', resolved_items: [], children: {} } } },
    );
    expect(nodeOf(graph, 'fan').data.children).toEqual({ total: 0, counts: [], waitingForApproval: 0 });
    expect(nodeOf(graph, 'fan').data.childrenText).toBe('0 items');
  });

  it('counts a loop\'s iterations', () => {
    const graph = buildRunGraph(
      { steps: { poll: { type: 'loop', input: { body_step: 'check' } }, check: {} } },
      { steps: { poll: { status: 'succeeded', children: { 'poll[0]': { status: 'succeeded' } } }, check: { status: 'skipped' } } },
    );
    expect(nodeOf(graph, 'poll').data.childrenText).toBe('1 iteration: 1 succeeded');
    expect(nodeOf(graph, 'check').data.status).toBe('skipped');
  });

  it('links parallel branches, loop bodies and error handlers', () => {
    const graph = buildRunGraph(
      {
        steps: {
          checks: { type: 'parallel', input: { steps: 'stock, fraud' } },
          stock: {},
          fraud: { on_error: 'alert' },
          alert: { type: 'notify' },
          poll: { type: 'loop', input: { body_step: 'check' } },
          check: {},
        },
      },
      { steps: {} },
    );
    expect(graph.edges.map((e) => [e.source, e.target, e.kind])).toEqual([
      ['checks', 'stock', 'runs'],
      ['checks', 'fraud', 'runs'],
      ['fraud', 'alert', 'on_error'],
      ['poll', 'check', 'runs'],
    ]);
  });

  it('ignores links to unknown steps and keeps run-only steps', () => {
    const graph = buildRunGraph(
      { steps: { a: { depends_on: ['ghost', 'a'] } } },
      { steps: { a: { status: 'Failed', error: { code: 'job_failed', message: 'the step job failed' } }, old: { status: 'skipped' } } },
    );
    expect(graph.edges).toEqual([]);
    expect(graph.nodes.map((n) => [n.id, n.data.status, n.data.kind])).toEqual([
      ['a', 'failed', 'worker'],
      ['old', 'skipped', ''],
    ]);
    expect(nodeOf(graph, 'a').data.errorText).toBe('the step job failed');
  });

  it('shows the run steps alone when the definition is missing', () => {
    const graph = buildRunGraph(undefined, RUN);
    expect(graph.nodes.map((n) => n.id)).toEqual(['needs_approval', 'approve']);
    expect(graph.edges).toEqual([]);
  });

  it('makes a node taller for each extra line it shows', () => {
    const graph = buildRunGraph(DEFINITION, RUN);
    expect(nodeOf(graph, 'approve').height).toBeGreaterThan(nodeOf(graph, 'wait').height);
  });
});
