// The Tensors panel's state on the host side: a pure reducer over what the backend
// reports (hits, live summaries, replies) plus `panelView`, which derives the header
// ("Not connected" / "Waiting for the first forward…" / "Paused in layer X (phase)")
// and the table the webview draws. A new debug session starts clean: the notices of
// ended sessions go, and none of theirs arrives later. No `vscode`: unit-tested directly.

import type { HitMessage, NanOrigin, TensorSummary } from '../protocol/messages.gen';
import type { BornAt, PanelIntervention, PanelNotice, PanelTarget, PanelView } from '../protocol/webview';

export interface PanelProcess {
  id: string;
  label: string;
  /** Its debug session's key. */
  session?: string;
}

export interface PanelState {
  processes: PanelProcess[];
  /** The newest debug session seen; notices of others are dropped once theirs have ended. */
  session?: string;
  target?: PanelTarget;
  paused?: { processId: string; model: string; layer: string; phase: string; reason: string; step: number; origin?: string; rearm?: string; bornAt?: BornAt; hit: number; suggested?: PanelView['suggested'] };
  /** Stops seen (numbers each stop, so two stops alike are still told apart). */
  hits: number;
  /** Latest summary of each tensor of the target, by path ('output', 'grad_output[0]', 'weight.grad'...). */
  tensors: TensorSummary[];
  phase?: string;
  step?: number;
  interventions: Record<string, PanelIntervention[]>;
  notices: PanelNotice[];
  breakOnNonFinite: boolean;
  revision: number;
}

export type PanelAction =
  | { type: 'processes'; processes: PanelProcess[] }
  | { type: 'select'; target: PanelTarget }
  | { type: 'hit'; processId: string; processLabel: string; hit: HitMessage; cls?: string }
  | { type: 'resumed'; processId: string }
  | { type: 'summaries'; processId: string; model: string; layer: string; phase?: string; step: number; tensors: TensorSummary[] }
  | { type: 'interventions'; processId: string; interventions: PanelIntervention[] }
  | { type: 'notice'; notice: PanelNotice }
  | { type: 'exited'; processId: string; label: string; reason: string; session?: string }
  | { type: 'breakOnNonFinite'; enabled: boolean };

export const MAX_NOTICES = 4;

export function initialPanelState(): PanelState {
  return { processes: [], hits: 0, tensors: [], interventions: {}, notices: [], breakOnNonFinite: false, revision: 0 };
}

function sameTarget(t: PanelTarget | undefined, processId: string, model: string, layer: string): boolean {
  return !!t && t.processId === processId && t.model === model && t.layer === layer;
}

/** Newer summaries replace older ones of the same path; order: inputs, outputs, gradients, parameters as they come. */
export function mergeTensors(old: readonly TensorSummary[], fresh: readonly TensorSummary[]): TensorSummary[] {
  const byPath = new Map(old.map((t) => [t.path, t] as const));
  for (const t of fresh) byPath.set(t.path, t);
  return [...byPath.values()];
}

/** Whether a notice about `session` still belongs in the panel: the newest session's, or one still connected. */
function sessionShown(state: PanelState, session: string | undefined): boolean {
  return session === undefined || session === state.session || state.processes.some((p) => p.session === session);
}

/** A process of a session not seen before starts that session: the notices of ended sessions go. */
function withNewSession(state: PanelState, processes: PanelProcess[]): PanelState {
  const known = new Set([state.session, ...state.processes.map((p) => p.session)]);
  const fresh = processes.find((p) => p.session !== undefined && !known.has(p.session));
  if (!fresh) return state;
  const live = new Set(processes.map((p) => p.session));
  return { ...state, session: fresh.session, notices: state.notices.filter((n) => n.session !== undefined && live.has(n.session)) };
}

export function panelReducer(state: PanelState, action: PanelAction): PanelState {
  switch (action.type) {
    case 'processes': {
      state = withNewSession(state, action.processes);
      const ids = new Set(action.processes.map((p) => p.id));
      const targetGone = state.target && !ids.has(state.target.processId);
      return {
        ...state,
        processes: action.processes,
        target: targetGone ? undefined : state.target,
        tensors: targetGone ? [] : state.tensors,
        paused: state.paused && ids.has(state.paused.processId) ? state.paused : undefined,
        revision: targetGone ? state.revision + 1 : state.revision,
      };
    }
    case 'select': {
      const t = action.target;
      if (sameTarget(state.target, t.processId, t.model, t.layer)) return { ...state, target: t };
      return { ...state, target: t, tensors: [], phase: undefined, step: undefined, revision: state.revision + 1 };
    }
    case 'hit': {
      const h = action.hit;
      const target: PanelTarget = { processId: action.processId, processLabel: action.processLabel, model: h.model, layer: h.layer, cls: action.cls };
      const sameLayer = sameTarget(state.target, action.processId, h.model, h.layer);
      const hits = state.hits + 1;
      return {
        ...state,
        target,
        hits,
        paused: h.pausing
          ? { processId: action.processId, model: h.model, layer: h.layer, phase: h.phase, reason: h.reason, step: h.step, origin: h.origin, rearm: h.rearm, bornAt: bornAt(h.op), hit: hits, suggested: suggestedView(h) }
          : state.paused,
        tensors: sameLayer ? mergeTensors(state.tensors, h.summaries) : [...h.summaries],
        phase: h.phase,
        step: h.step,
        revision: state.revision + 1,
      };
    }
    case 'resumed':
      if (state.paused?.processId !== action.processId) return state;
      return { ...state, paused: undefined, revision: state.revision + 1 };
    case 'summaries': {
      if (!sameTarget(state.target, action.processId, action.model, action.layer)) return state;
      const stepChanged = action.step !== state.step;
      return {
        ...state,
        tensors: mergeTensors(state.tensors, action.tensors),
        phase: action.phase ?? state.phase,
        step: action.step,
        revision: stepChanged ? state.revision + 1 : state.revision,
      };
    }
    case 'interventions':
      return { ...state, interventions: { ...state.interventions, [action.processId]: action.interventions } };
    case 'notice':
      if (!sessionShown(state, action.notice.session)) return state; // from a session that has ended
      return { ...state, notices: [...state.notices, action.notice].slice(-MAX_NOTICES) };
    case 'exited': {
      const { [action.processId]: _gone, ...interventions } = state.interventions;
      const wasTarget = state.target?.processId === action.processId;
      const said = sessionShown(state, action.session)
        ? [...state.notices, { level: 'info' as const, message: `${action.label} exited (${action.reason})`, session: action.session }]
        : state.notices;
      return {
        ...state,
        processes: state.processes.filter((p) => p.id !== action.processId),
        target: wasTarget ? undefined : state.target,
        tensors: wasTarget ? [] : state.tensors,
        paused: state.paused?.processId === action.processId ? undefined : state.paused,
        interventions,
        notices: said.slice(-MAX_NOTICES),
        revision: state.revision + 1,
      };
    }
    case 'breakOnNonFinite':
      return { ...state, breakOnNonFinite: action.enabled };
  }
}

/** What the webview shows for a state. */
export function panelView(state: PanelState): PanelView {
  const base = {
    target: state.target,
    phase: state.phase,
    step: state.step,
    tensors: state.tensors,
    interventions: state.target ? state.interventions[state.target.processId] ?? [] : [],
    notices: state.notices,
    breakOnNonFinite: state.breakOnNonFinite,
    processes: state.processes.length,
    revision: state.revision,
  };
  if (state.processes.length === 0) {
    return {
      ...base, status: 'notConnected', headline: 'Not connected',
      detail: 'Start debugging a PyTorch script: Hookscope connects to it by itself.',
    };
  }
  const processes = `${state.processes.length} process${state.processes.length === 1 ? '' : 'es'} connected`;
  if (state.paused) {
    const p = state.paused;
    const where = state.processes.length > 1 ? ` · ${state.target?.processLabel ?? ''}` : '';
    // The reason is said once (its own line), not again in the detail.
    return {
      ...base, status: 'paused', headline: `Paused in layer ${p.layer} (${p.phase})`,
      detail: `${stepText(p.step)}${where}`, pausedReason: `${p.reason}${p.origin ? ` — ${p.origin}` : ''}`,
      stop: { processId: p.processId, model: p.model, layer: p.layer, phase: p.phase, step: p.step, hit: p.hit },
      rearm: p.rearm,
      bornAt: p.bornAt,
      suggested: p.suggested,
    };
  }
  if (!state.target) {
    return {
      ...base, status: 'waiting', headline: 'Waiting for the first forward',
      detail: `${processes}. Select a layer in the Layers view or set a layer breakpoint.`,
    };
  }
  const layer = state.target.layer || state.target.model;
  if (state.tensors.length === 0) {
    return {
      ...base, status: 'waiting', headline: `Waiting for the first forward of ${layer}`,
      detail: `${state.target.processLabel} · summaries appear when the layer runs.`,
    };
  }
  return {
    ...base, status: 'live', headline: `Layer ${layer}${state.phase ? ` (${state.phase})` : ''}`,
    detail: `${state.step !== undefined ? `${stepText(state.step)} · ` : ''}${state.target.processLabel}`,
  };
}

/** How a step is written in the panel (one place, so it reads the same everywhere). */
/** The view a hit asks the panel for (a gradient-health stop: the gradient-flow view by norm). */
function suggestedView(hit: HitMessage): PanelView['suggested'] {
  if (hit.view !== 'gradientFlow') return undefined;
  return { visual: 'gradientFlow', options: { ...hit.viewOptions } };
}

/** The hit's `op` (break on NaN/Inf, from the replay), when it names a line of the user's code. */
export function bornAt(op: NanOrigin | undefined): BornAt | undefined {
  if (op?.file === undefined || op.line === undefined) return undefined;
  return { op: op.op, file: op.file, line: op.line, fn: op.function };
}

export function stepText(step: number): string {
  return `step ${step}`;
}
