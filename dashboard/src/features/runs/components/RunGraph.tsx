import '@xyflow/react/dist/style.css';
import '../runs.css';

import {
  Background,
  Controls,
  MarkerType,
  ReactFlow,
  type Edge,
  type NodeTypes,
} from '@xyflow/react';
import { useMemo } from 'react';

import { buildRunGraph, type RunGraphEdge } from '../graph';
import { statusWords } from '../status';
import type { Definition, RunDetail } from '../types';

import { StepNode, type StepFlowNode } from './StepNode';

const nodeTypes: NodeTypes = { step: StepNode };

const MIN_HEIGHT = 260;
const MAX_HEIGHT = 640;

function flowEdge(edge: RunGraphEdge): Edge {
  const base: Edge = {
    id: edge.id,
    source: edge.source,
    target: edge.target,
    type: 'smoothstep',
    markerEnd: { type: MarkerType.ArrowClosed },
    className: `run-edge run-edge--${edge.kind}`,
    focusable: false,
  };
  if (edge.kind === 'runs') return { ...base, label: 'runs' };
  if (edge.kind === 'on_error') return { ...base, label: 'on error' };
  return base;
}

export type RunGraphProps = {
  definition: Definition | null | undefined;
  run: RunDetail;
};

/** The run's steps as a read-only graph, laid out top to bottom and fitted to view. */
export function RunGraph({ definition, run }: RunGraphProps) {
  const graph = useMemo(() => buildRunGraph(definition, run), [definition, run]);
  const nodes = useMemo<StepFlowNode[]>(
    () =>
      graph.nodes.map((n) => ({
        id: n.id,
        type: 'step',
        position: n.position,
        width: n.width,
        height: n.height,
        data: n.data,
        ariaLabel: `Step ${n.id}: ${statusWords(n.data.status)}${
          n.data.waitingForApproval ? ', waiting for approval' : ''
        }`,
      })),
    [graph],
  );
  const edges = useMemo(() => graph.edges.map(flowEdge), [graph]);
  const height = useMemo(() => {
    const bottom = Math.max(0, ...graph.nodes.map((n) => n.position.y + n.height));
    const top = Math.min(0, ...graph.nodes.map((n) => n.position.y));
    return Math.min(MAX_HEIGHT, Math.max(MIN_HEIGHT, bottom - top + 48));
  }, [graph]);

  if (graph.nodes.length === 0) {
    return <p className="runs-muted">This run has no steps to show.</p>;
  }
  return (
    <div className="run-graph" style={{ height }} data-layout={graph.layout}>
      <ReactFlow
        nodes={nodes}
        edges={edges}
        nodeTypes={nodeTypes}
        nodesDraggable={false}
        nodesConnectable={false}
        elementsSelectable={false}
        edgesFocusable={false}
        zoomOnScroll={false}
        preventScrolling={false}
        fitView
        fitViewOptions={{ padding: 0.15 }}
        minZoom={0.2}
      >
        <Background gap={16} />
        <Controls showInteractive={false} />
      </ReactFlow>
    </div>
  );
}

export default RunGraph;
