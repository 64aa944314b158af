// Three status bar items: the connection ("Hookscope: 1 process · 1 model", or the layer the
// program is paused in, plus active interventions), the Break on NaN/Inf switch, and beside it
// the gradient-norm switches (exploding / vanishing), whose menu sets their thresholds.

import * as vscode from 'vscode';
import type { BackendHub } from '../backend/hub';
import type { GradientThresholds } from '../backend/hub';
import { Commands } from '../constants';
import { gradientStatusText } from '../common/thresholds';

export class HookscopeStatusBar implements vscode.Disposable {
  private readonly connection = vscode.window.createStatusBarItem('hookscope.connection', vscode.StatusBarAlignment.Left, 50);
  private readonly nonFinite = vscode.window.createStatusBarItem('hookscope.breakOnNonFinite', vscode.StatusBarAlignment.Left, 49);
  private readonly gradients = vscode.window.createStatusBarItem('hookscope.breakOnGradients', vscode.StatusBarAlignment.Left, 48);
  private readonly disposables: vscode.Disposable[] = [];
  private breakOnNonFinite = false;
  private thresholds: GradientThresholds = {};

  constructor(private readonly hub: BackendHub) {
    this.connection.name = 'Hookscope: connection';
    this.connection.command = Commands.showTensors;
    this.nonFinite.name = 'Hookscope: Break on NaN/Inf';
    this.nonFinite.command = Commands.toggleBreakOnNonFinite;
    this.gradients.name = 'Hookscope: Break on exploding/vanishing gradients';
    this.gradients.command = Commands.gradientHealthMenu;
    this.disposables.push(
      this.connection,
      this.nonFinite,
      this.gradients,
      hub.onDidChangeProcesses(() => this.update()),
      hub.onDidChangeModels(() => this.update()),
      hub.onDidChangeInterventions(() => this.update()),
    );
    this.update();
  }

  setBreakOnNonFinite(on: boolean): void {
    this.breakOnNonFinite = on;
    this.update();
  }

  setGradientThresholds(thresholds: GradientThresholds): void {
    this.thresholds = { ...thresholds };
    this.update();
  }

  /** The text the connection item shows (also written to the trace). */
  get text(): string {
    return this.connection.text;
  }

  private update(): void {
    const processes = this.hub.processes();
    const models = this.hub.modelCount();
    const paused = processes.find((p) => p.paused);
    const interventions = processes.reduce((n, p) => n + p.interventions.length, 0);
    if (processes.length === 0) {
      this.connection.text = '$(debug-disconnect) Hookscope: not connected';
      this.connection.tooltip = 'No debugged process is connected. Start debugging a PyTorch script.';
      this.connection.backgroundColor = undefined;
    } else {
      const base = `${processes.length} process${processes.length === 1 ? '' : 'es'} · ${models} model${models === 1 ? '' : 's'}`;
      const extra = interventions ? ` · $(beaker) ${interventions} intervention${interventions === 1 ? '' : 's'}` : '';
      this.connection.text = paused
        ? `$(debug-pause) Hookscope: paused in ${paused.paused!.layer} (${paused.paused!.phase})${extra}`
        : `$(pulse) Hookscope: ${base}${extra}`;
      this.connection.tooltip = [
        base,
        ...processes.map((p) => `${p.label}: ${p.models.size} model(s), hookscope ${p.hookscope}, torch ${p.torch}${p.paused ? ` — ${p.paused.reason}` : ''}`),
        interventions ? `${interventions} active intervention(s) change the model's activations` : '',
      ].filter(Boolean).join('\n');
      this.connection.backgroundColor = interventions ? new vscode.ThemeColor('statusBarItem.warningBackground') : undefined;
    }
    this.connection.show();
    this.nonFinite.text = this.breakOnNonFinite ? '$(error) NaN/Inf: break' : '$(circle-slash) NaN/Inf: off';
    this.nonFinite.tooltip = this.breakOnNonFinite
      ? 'Hookscope pauses at the first layer that produces NaN/Inf. Click to turn off.'
      : 'Click to pause at the first layer that produces NaN/Inf.';
    this.nonFinite.show();
    const { exploding, vanishing } = this.thresholds;
    this.gradients.text = gradientStatusText(this.thresholds);
    this.gradients.tooltip = [
      exploding !== undefined ? `Pauses when a parameter's gradient norm goes above ${exploding}.` : 'Exploding gradients: off.',
      vanishing !== undefined ? `Pauses when a layer's gradient norm goes below ${vanishing}.` : 'Vanishing gradients: off.',
      'Click for the menu: Break on NaN/Inf and the gradient thresholds.',
    ].join('\n');
    this.gradients.show();
  }

  dispose(): void {
    for (const d of this.disposables.splice(0)) d.dispose();
  }
}
