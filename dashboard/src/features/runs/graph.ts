/**
 * A run's graph: the definition's steps as nodes, their links as edges, each node with
 * the status the run document gives its step, laid out top to bottom.
 *
 * Steps the run has but the definition does not (a definition changed or deleted since
 * the run started) are shown too, without edges, so the page never hides a step.
 */

import { dagreLayout, stackLayout, type Layout, type Position } from './layout';
import { awaitsApproval, orderedChildren, statusWords } from './status';
import type { Definition, DefinitionStep, RunDetail, StepRun } from './types';

export const NODE_WIDTH = 220;
const BASE_HEIGHT = 76;
const LINE_HEIGHT = 20;
/** About what one line of a node holds; a longer children line wraps to a second. */
const LINE_CHARS = 30;

export type ChildSummary = {
  /** Items (or iterations) known: the resolved for_each list's length when larger. */
  total: number;
  /** How many children are in each status, in first-seen order of the items. */
  counts: Array<{ status: string; count: number }>;
  /** Children standing at an approval gate. */
  waitingForApproval: number;
};

export type StepNodeData = {
  stepId: string;
  name: string;
  kind: string;
  forEach: boolean;
  /** As the run document spells it, lowercased; `pending` when the run has not reached it. */
  status: string;
  waitingForApproval: boolean;
  attempts: number;
  errorText: string;
  children: ChildSummary | null;
  /** The children in words: "3 items: 2 succeeded, 1 running"; "" without children. */
  childrenText: string;
};

export type RunGraphNode = {
  id: string;
  position: Position;
  width: number;
  height: number;
  data: StepNodeData;
};

/** `depends_on`; `runs`: a parallel step's branch or a loop's body; `on_error`: a handler. */
export type EdgeKind = 'depends_on' | 'runs' | 'on_error';

export type RunGraphEdge = { id: string; source: string; target: string; kind: EdgeKind };

export type RunGraph = {
  nodes: RunGraphNode[];
  edges: RunGraphEdge[];
  /** Which layout placed the nodes: `stack` when the layered one failed. */
  layout: 'layered' | 'stack';
};

function textOf(value: unknown): string {
  return typeof value === 'string' ? value.trim() : '';
}

/** The steps a parallel step runs: `input.steps` as a list or "a,b". */
function parallelBranches(step: DefinitionStep): string[] {
  const raw = step.input?.steps;
  if (typeof raw === 'string') return raw.split(',').map((s) => s.trim()).filter(Boolean);
  if (Array.isArray(raw)) return raw.map(textOf).filter(Boolean);
  return [];
}

function loopBody(step: DefinitionStep): string {
  return textOf(step.input?.body_step ?? step.input?.body);
}

function summarise(step: StepRun): ChildSummary | null {
  const children = orderedChildren(step);
  const resolved = Array.isArray(step.resolved_items) ? step.resolved_items.length : 0;
  if (children.length === 0 && !Array.isArray(step.resolved_items)) return null;
  const counts: Array<{ status: string; count: number }> = [];
  let waitingForApproval = 0;
  for (const [, child] of children) {
    const status = (child.status ?? 'pending').toLowerCase();
    const entry = counts.find((c) => c.status === status);
    if (entry) entry.count += 1;
    else counts.push({ status, count: 1 });
    if (awaitsApproval(child)) waitingForApproval += 1;
  }
  return { total: Math.max(children.length, resolved), counts, waitingForApproval };
}

function childrenText(kind: string, children: ChildSummary | null): string {
  if (!children) return '';
  const noun = kind === 'loop' ? 'iteration' : 'item';
  const head = `${children.total} ${noun}${children.total === 1 ? '' : 's'}`;
  if (children.counts.length === 0) return head;
  return `${head}: ${children.counts.map((c) => `${c.count} ${statusWords(c.status)}`).join(', ')}`;
}

function errorText(step: StepRun | undefined): string {
  const error = step?.error;
  if (!error) return '';
  return textOf(error.message) || textOf(error.code) || textOf(error.reason);
}

function nodeData(stepId: string, def: DefinitionStep | undefined, run: StepRun | undefined): StepNodeData {
  const status = (textOf(run?.status) || 'pending').toLowerCase();
  const name = textOf(def?.name);
  const children = run ? summarise(run) : null;
  const kind = (textOf(def?.type) || (def ? 'worker' : '')).toLowerCase();
  return {
    stepId,
    name: name && name !== stepId ? name : '',
    kind,
    forEach: Boolean(textOf(def?.for_each)),
    status,
    waitingForApproval: awaitsApproval(run) || (children?.waitingForApproval ?? 0) > 0,
    attempts: typeof run?.attempts === 'number' ? run.attempts : 0,
    errorText: errorText(run),
    children,
    childrenText: childrenText(kind, children),
  };
}

/** Room for the lines a node shows beyond its id, kind and status. */
function heightOf(data: StepNodeData): number {
  let lines = 0;
  if (data.name) lines += 1;
  if (data.childrenText) lines += data.childrenText.length > LINE_CHARS ? 2 : 1;
  if (data.waitingForApproval) lines += 1;
  if (data.errorText) lines += 1;
  return BASE_HEIGHT + lines * LINE_HEIGHT;
}

function edgesOf(steps: Record<string, DefinitionStep>, known: Set<string>): RunGraphEdge[] {
  const edges: RunGraphEdge[] = [];
  const seen = new Set<string>();
  const add = (source: string, target: string, kind: EdgeKind) => {
    const id = `${kind}:${source}->${target}`;
    if (source === target || !known.has(source) || !known.has(target) || seen.has(id)) return;
    seen.add(id);
    edges.push({ id, source, target, kind });
  };
  for (const [stepId, step] of Object.entries(steps)) {
    for (const dep of Array.isArray(step.depends_on) ? step.depends_on : []) {
      add(textOf(dep), stepId, 'depends_on');
    }
    const kind = textOf(step.type).toLowerCase();
    if (kind === 'parallel') parallelBranches(step).forEach((branch) => add(stepId, branch, 'runs'));
    if (kind === 'loop') add(stepId, loopBody(step), 'runs');
    if (textOf(step.on_error)) add(stepId, textOf(step.on_error), 'on_error');
  }
  return edges;
}

function placed(
  positions: Map<string, Position> | undefined,
  ids: string[],
): positions is Map<string, Position> {
  return positions !== undefined && ids.every((id) => {
    const p = positions.get(id);
    return p !== undefined && Number.isFinite(p.x) && Number.isFinite(p.y);
  });
}

/**
 * Nodes and edges of a run, laid out by `layout` (dagre unless given); a layout that
 * throws or leaves a node unplaced gives way to a single column.
 */
export function buildRunGraph(
  definition: Definition | null | undefined,
  run: RunDetail,
  layout: Layout = dagreLayout,
): RunGraph {
  const defSteps = definition?.steps ?? {};
  const runSteps = run.steps ?? {};
  const ids = [...Object.keys(defSteps), ...Object.keys(runSteps).filter((id) => !(id in defSteps))];
  const nodes = ids.map((id) => {
    const data = nodeData(id, defSteps[id], runSteps[id]);
    return { id, width: NODE_WIDTH, height: heightOf(data), data, position: { x: 0, y: 0 } };
  });
  const edges = edgesOf(defSteps, new Set(ids));

  let positions: Map<string, Position> | undefined;
  let used: RunGraph['layout'] = 'layered';
  try {
    positions = layout(nodes, edges);
  } catch {
    positions = undefined;
  }
  if (!placed(positions, ids)) {
    positions = stackLayout(nodes, edges);
    used = 'stack';
  }
  for (const node of nodes) node.position = positions.get(node.id) ?? { x: 0, y: 0 };
  return { nodes, edges, layout: used };
}
