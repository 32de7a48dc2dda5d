import { Handle, Position, type Node, type NodeProps } from '@xyflow/react';

import type { StepNodeData } from '../graph';
import { statusTone, statusWords } from '../status';

export type StepFlowNode = Node<StepNodeData, 'step'>;

/**
 * One step of the run graph. Its colour follows the status, and the status is always
 * written out too; `data-testid` and `data-status` let browser tests find it.
 */
export function StepNode({ data }: NodeProps<StepFlowNode>) {
  const tone = statusTone(data.status);
  const kind = [data.kind, data.forEach ? 'for each' : ''].filter(Boolean).join(' · ');
  const selfWaiting = data.waitingForApproval && data.status === 'waiting';
  return (
    <div
      className={`run-step run-step--${tone}`}
      data-testid={`step-${data.stepId}`}
      data-status={data.status}
    >
      <Handle type="target" position={Position.Top} isConnectable={false} className="run-step__handle" />
      <div className="run-step__head">
        <span className="run-step__id">{data.stepId}</span>
        {kind && <span className="run-step__kind">{kind}</span>}
      </div>
      {data.name && <div className="run-step__name">{data.name}</div>}
      <div className="run-step__status">
        <span className="run-step__mark" aria-hidden="true" />
        <span className="run-step__word">{statusWords(data.status)}</span>
        {data.attempts > 1 && <span className="run-step__attempts">attempt {data.attempts}</span>}
      </div>
      {data.childrenText && <div className="run-step__line run-step__items">{data.childrenText}</div>}
      {data.waitingForApproval && (
        <div className="run-step__line run-step__gate">
          {selfWaiting ? 'Waiting for approval' : 'Items waiting for approval'}
        </div>
      )}
      {data.errorText && (
        <div className="run-step__line run-step__error" title={data.errorText}>
          {data.errorText}
        </div>
      )}
      <Handle type="source" position={Position.Bottom} isConnectable={false} className="run-step__handle" />
    </div>
  );
}
