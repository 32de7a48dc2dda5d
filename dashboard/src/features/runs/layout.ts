import dagre from '@dagrejs/dagre';

export type LayoutNode = { id: string; width: number; height: number };
export type LayoutEdge = { source: string; target: string };
export type Position = { x: number; y: number };

/** Top-left position of each node, by id. */
export type Layout = (nodes: LayoutNode[], edges: LayoutEdge[]) => Map<string, Position>;

const NODE_GAP = 48;
const RANK_GAP = 64;

/** Dagre's layered layout, top to bottom. */
export const dagreLayout: Layout = (nodes, edges) => {
  const graph = new dagre.graphlib.Graph();
  graph.setGraph({ rankdir: 'TB', nodesep: NODE_GAP, ranksep: RANK_GAP, marginx: 8, marginy: 8 });
  graph.setDefaultEdgeLabel(() => ({}));
  for (const node of nodes) graph.setNode(node.id, { width: node.width, height: node.height });
  for (const edge of edges) graph.setEdge(edge.source, edge.target);
  dagre.layout(graph);
  const positions = new Map<string, Position>();
  for (const node of nodes) {
    const placed = graph.node(node.id);
    // Dagre places centres; React Flow positions top-left corners.
    positions.set(node.id, { x: placed.x - node.width / 2, y: placed.y - node.height / 2 });
  }
  return positions;
};

/** One column, in the order given: what is shown when the layered layout fails. */
export const stackLayout: Layout = (nodes) => {
  const positions = new Map<string, Position>();
  let y = 0;
  for (const node of nodes) {
    positions.set(node.id, { x: 0, y });
    y += node.height + NODE_GAP;
  }
  return positions;
};
