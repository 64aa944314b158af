// Maps a source line to the layers it stands for, through the backend's module trees.
//
// A definition line (`self.conv1 = nn.Conv2d(...)`, an `nn.Sequential(...)` entry) is
// matched by the file/line the backend recorded for each module. A call site
// (`x = self.conv1(x)`, `self.blocks[2](x)`) is matched by the attribute it calls:
// modules with that name, created in the same file (the class that owns them).
// Pure: no `vscode`, paths compared after normalisation.

import type { ModelTree } from '../protocol/messages.gen';

export interface LayerRef {
  model: string;
  layer: string;
  cls: string;
}

/** Normalise a path for comparison: forward slashes, no trailing slash, case-folded on Windows-like paths. */
export function normalizePath(path: string): string {
  let p = path.replace(/\\/g, '/');
  if (/^[a-zA-Z]:\//.test(p)) p = p[0].toLowerCase() + p.slice(1);
  return p.replace(/\/+$/, '');
}

/** Layers whose definition the backend recorded at `file`:`line1` (1-based). */
export function layersDefinedAt(models: readonly ModelTree[], file: string, line1: number): LayerRef[] {
  const target = normalizePath(file);
  const out: LayerRef[] = [];
  for (const model of models) {
    for (const m of model.modules) {
      if (m.line === line1 && m.file && normalizePath(m.file) === target) {
        out.push({ model: model.id, layer: m.name, cls: m.cls });
      }
    }
  }
  return out;
}

/** The module attribute a call-site line calls: `self.conv1(x)` -> "conv1", `self.blocks[2](x)` -> "blocks.2". */
export function calledAttribute(lineText: string): string | undefined {
  const code = lineText.replace(/#.*$/, '');
  const match = /\bself\.([A-Za-z_]\w*)(?:\[(\d+)\])?\s*\(/.exec(code);
  if (!match) return undefined;
  return match[2] !== undefined ? `${match[1]}.${match[2]}` : match[1];
}

/** Layers a call-site line calls: modules named `attr` (at any depth) created in `file`. */
export function layersCalledAt(models: readonly ModelTree[], file: string, lineText: string): LayerRef[] {
  const attr = calledAttribute(lineText);
  if (!attr) return [];
  const target = normalizePath(file);
  const out: LayerRef[] = [];
  for (const model of models) {
    for (const m of model.modules) {
      const named = m.name === attr || m.name.endsWith(`.${attr}`);
      if (named && m.file && normalizePath(m.file) === target) out.push({ model: model.id, layer: m.name, cls: m.cls });
    }
  }
  return out;
}

/** Every layer a line stands for: its definitions first, else the modules it calls. */
export function layersAtLine(models: readonly ModelTree[], file: string, line0: number, lineText: string): LayerRef[] {
  const defined = layersDefinedAt(models, file, line0 + 1);
  return defined.length > 0 ? defined : layersCalledAt(models, file, lineText);
}
