// Typed access to the `hookscope.*` settings.

import * as vscode from 'vscode';
import type { GradientThresholds } from '../backend/hub';
import { Settings } from '../constants';
import { besideAtStop, type BesideAtStop } from './stopPlacement';

function config(scope?: vscode.ConfigurationScope): vscode.WorkspaceConfiguration {
  return vscode.workspace.getConfiguration(Settings.section, scope);
}

/** Interpreter chosen for Hookscope explicitly (overrides the Python extension's). */
export function pythonPathSetting(scope?: vscode.ConfigurationScope): string | undefined {
  const value = config(scope).get<string>(Settings.pythonPath, '').trim();
  return value || undefined;
}

/** Which hookscope package runs: the one bundled in the extension (default) or the interpreter's own. */
export function backendSourceSetting(): 'bundled' | 'environment' {
  return config().get<string>(Settings.backend, 'bundled') === 'environment' ? 'environment' : 'bundled';
}

export async function setBackendSourceSetting(source: 'bundled' | 'environment'): Promise<void> {
  await config().update(Settings.backend, source, settingsTarget());
}

export async function setPythonPathSetting(python: string): Promise<void> {
  await config().update(Settings.pythonPath, python, settingsTarget());
}

/** How often a watched layer's summaries refresh while the program runs. */
export function summaryRateHz(): number {
  const value = config().get<number>(Settings.summaryRateHz, 4);
  return Number.isFinite(value) && value > 0 ? Math.min(value, 30) : 4;
}

export function breakOnNonFiniteSetting(): boolean {
  return config().get<boolean>(Settings.breakOnNonFinite, false);
}

export async function setBreakOnNonFiniteSetting(on: boolean): Promise<void> {
  await config().update(Settings.breakOnNonFinite, on, settingsTarget());
}

export function gradientThresholdsSetting(): GradientThresholds {
  const read = (key: string): number | undefined => {
    const value = config().get<number | null>(key, null);
    return typeof value === 'number' && Number.isFinite(value) && value > 0 ? value : undefined;
  };
  return { exploding: read(Settings.breakOnExplodingGradients), vanishing: read(Settings.breakOnVanishingGradients) };
}

export async function setGradientThresholdSetting(which: 'exploding' | 'vanishing', value: number | undefined): Promise<void> {
  const key = which === 'exploding' ? Settings.breakOnExplodingGradients : Settings.breakOnVanishingGradients;
  await config().update(key, value ?? null, settingsTarget());
}

/** Where a switch flipped from the UI is saved: the workspace when one is open. */
function settingsTarget(): vscode.ConfigurationTarget {
  return vscode.workspace.workspaceFolders?.length ? vscode.ConfigurationTarget.Workspace : vscode.ConfigurationTarget.Global;
}

/** Run torch.compile'd code eagerly while debugging, so layer hooks inside compiled modules fire. */
export function runCompiledEagerlySetting(): boolean {
  return config().get<boolean>(Settings.runCompiledEagerly, false);
}

export async function setRunCompiledEagerlySetting(on: boolean): Promise<void> {
  await config().update(Settings.runCompiledEagerly, on, settingsTarget());
}

/** Whether a stop opens the Tensors panel beside the code (stopPlacement.ts). */
export function besideAtStopSetting(): BesideAtStop {
  return besideAtStop(config().get<string>(Settings.openTensorsBesideAtStop, 'figures'));
}

export function traceFileSetting(): string | undefined {
  const value = config().get<string>(Settings.traceFile, '').trim();
  return value || undefined;
}

export function affects(event: vscode.ConfigurationChangeEvent, key: string): boolean {
  return event.affectsConfiguration(`${Settings.section}.${key}`);
}
