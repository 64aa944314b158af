// The Tensors panel's webviews: the "Tensors" view in the side bar and, on request ("Hookscope:
// Open Tensors Panel in Editor"), the same panel in the editor area beside the code for a wide
// view. Both show the panel's view model (posted at a readable rate), answer their own render
// requests with PNG data URLs, save images, and route intervention actions.

import * as vscode from 'vscode';
import type { ExtensionLog } from '../common/log';
import { Commands, Views } from '../constants';
import type { FromWebview, PanelFigure, ToWebview } from '../protocol/webview';
import { isInspectFromWebview, type InspectFromWebview, type InspectToWebview } from './inspectProtocol';
import type { PanelController, RenderedFigure } from './panelController';
import { TensorsWebview, type TensorsHostKind } from './tensorsWebview';

/** Live updates reach the webview at most this often (people cannot read faster). */
const POST_INTERVAL_MS = 100;
/** The editor-area panel's type (its id in VS Code's webview registry). */
export const TENSORS_EDITOR_PANEL = 'hookscope.tensorsEditor';

export class TensorsViewProvider implements vscode.WebviewViewProvider, vscode.Disposable {
  static readonly viewType = Views.tensors;
  private view: vscode.WebviewView | undefined;
  private editorPanel: vscode.WebviewPanel | undefined;
  private readonly hosts = new Set<TensorsWebview>();
  private postTimer: NodeJS.Timeout | undefined;
  private lastPost = 0;
  private readonly disposables: vscode.Disposable[] = [];
  /** Receives the "Inspect" section's requests (inspectController.ts). */
  private inspectHandler: ((message: InspectFromWebview) => Promise<void>) | undefined;

  constructor(
    private readonly extensionUri: vscode.Uri,
    private readonly panel: PanelController,
    private readonly log: ExtensionLog,
  ) {
    const sub = panel.onDidChange(() => this.schedulePost());
    this.disposables.push({ dispose: () => sub.dispose() });
  }

  resolveWebviewView(view: vscode.WebviewView): void {
    this.view = view;
    this.attach('side', view.webview, () => view.visible, view.onDidDispose, view.onDidChangeVisibility, () => {
      if (this.view === view) this.view = undefined;
    });
  }

  /** Show the view without taking the keyboard focus (on a hit, or from the command). */
  async reveal(): Promise<void> {
    if (this.view) {
      this.view.show(true);
    } else {
      await vscode.commands.executeCommand(`${Views.tensors}.focus`);
    }
  }

  /** At a stop: the side bar's section, and the wide panel beside the code when `place` says so
   * (stopPlacement.ts). The section is revealed either way: a stop that only opened the editor panel
   * left Locals collapsed in Variables (VS Code expanded it with the section revealed; seen in
   * code-server, e2e 22 holds it). */
  async showAtStop(place: 'editor' | 'side'): Promise<void> {
    this.log.event('panel.shownAtStop', { place });
    await this.reveal();
    if (place === 'editor') this.openInEditor();
  }

  /** The panel in the editor area beside the code (one; brought forward where it is when already open:
   * the user may have moved it). */
  openInEditor(): void {
    if (this.editorPanel) {
      this.editorPanel.reveal(undefined, true);
      return;
    }
    const dist = vscode.Uri.joinPath(this.extensionUri, 'dist');
    const panel = vscode.window.createWebviewPanel(TENSORS_EDITOR_PANEL, 'Hookscope Tensors', { viewColumn: vscode.ViewColumn.Beside, preserveFocus: true }, {
      enableScripts: true, retainContextWhenHidden: true, localResourceRoots: [dist],
    });
    panel.iconPath = vscode.Uri.joinPath(this.extensionUri, 'media', 'hookscope.svg');
    this.editorPanel = panel;
    this.attach('editor', panel.webview, () => panel.visible, panel.onDidDispose, panel.onDidChangeViewState, () => {
      if (this.editorPanel === panel) this.editorPanel = undefined;
    });
    this.log.event('panel.openedInEditor', {});
  }

  /** Show the panel in `webview` until it is disposed; a hidden one gets the view again when shown. */
  private attach(kind: TensorsHostKind, webview: vscode.Webview, visible: () => boolean,
    onDidDispose: vscode.Event<void>, onDidChangeVisibility: vscode.Event<unknown>, gone: () => void): void {
    const host = new TensorsWebview(kind, webview, this.extensionUri, (h, m) => void this.onMessage(h, m), visible);
    this.hosts.add(host);
    this.disposables.push(
      onDidDispose(() => {
        this.hosts.delete(host);
        host.dispose();
        gone();
      }),
      onDidChangeVisibility(() => {
        if (visible()) this.schedulePost();
      }),
    );
  }

  private schedulePost(): void {
    if (this.postTimer) return;
    const wait = Math.max(0, POST_INTERVAL_MS - (Date.now() - this.lastPost));
    this.postTimer = setTimeout(() => {
      this.postTimer = undefined;
      this.postView();
    }, wait);
  }

  /** The view model to every webview on screen (a hidden one gets it when shown again). */
  private postView(only?: TensorsWebview): void {
    this.lastPost = Date.now();
    for (const host of only ? [only] : this.hosts) {
      if (host.showing) void host.post({ type: 'view', view: this.panel.view });
    }
  }

  setInspectHandler(handler: (message: InspectFromWebview) => Promise<void>): void {
    this.inspectHandler = handler;
  }

  /** A message for the "Inspect" section of every loaded webview ("Show" reveals the side view first). */
  async postInspect(message: InspectToWebview): Promise<boolean> {
    for (let waited = 0; ![...this.hosts].some((h) => h.ready) && waited < 5000; waited += 50) await new Promise((r) => setTimeout(r, 50));
    const sent = await Promise.all([...this.hosts].filter((h) => h.ready).map((h) => h.post(message)));
    return sent.some(Boolean);
  }

  private async onMessage(host: TensorsWebview, message: FromWebview | InspectFromWebview): Promise<void> {
    try {
      if (isInspectFromWebview(message)) {
        await this.inspectHandler?.(message);
        return;
      }
      switch (message.type) {
        case 'ready':
          this.log.event('panel.ready', { host: host.kind });
          this.postView(host);
          return;
        case 'render': {
          const figures = await this.panel.renderFigures(message.visual, message.options, message.tensors);
          for (const f of figures) {
            if (f.error) this.log.event('render.failed', { visual: message.visual, tensor: f.tensor ?? null, message: f.error });
          }
          await host.post({ type: 'images', seq: message.seq, visual: message.visual, figures: figures.map(toWebviewFigure) });
          return;
        }
        case 'savePng':
          await this.saveImage(host);
          return;
        case 'addIntervention':
          await this.panel.addIntervention(message.kind, message.channels, message.value);
          return;
        case 'removeIntervention':
          await this.panel.removeIntervention(message.id);
          return;
        case 'removeAllInterventions':
          await this.panel.removeIntervention(undefined);
          return;
        case 'toggleBreakOnNonFinite':
          await vscode.commands.executeCommand(Commands.toggleBreakOnNonFinite);
          return;
        case 'openSource': {
          // Only the line the panel shows: the webview is not trusted to name files.
          const born = this.panel.view.bornAt;
          if (!born || born.file !== message.file || born.line !== message.line) return;
          const position = new vscode.Position(Math.max(0, message.line - 1), 0);
          await vscode.window.showTextDocument(vscode.Uri.file(message.file), {
            selection: new vscode.Range(position, position), preview: true, viewColumn: vscode.ViewColumn.One,
          });
          return;
        }
      }
    } catch (err) {
      void vscode.window.showErrorMessage(`Hookscope: ${(err as Error).message}`);
    }
  }

  private async saveImage(host: TensorsWebview): Promise<void> {
    const image = this.panel.lastImage;
    if (!image) {
      void vscode.window.showInformationMessage('Hookscope: no image to save yet.');
      return;
    }
    const name = `${image.layer || 'model'}-${image.visual}.png`.replace(/[^\w.-]+/g, '_');
    const folder = vscode.workspace.workspaceFolders?.[0]?.uri;
    const target = await vscode.window.showSaveDialog({
      defaultUri: folder ? vscode.Uri.joinPath(folder, name) : undefined,
      filters: { 'PNG image': ['png'] },
      saveLabel: 'Save PNG',
    });
    if (!target) return;
    await vscode.workspace.fs.writeFile(target, image.png);
    this.log.event('image.saved', { path: target.fsPath, bytes: image.png.byteLength });
    await host.post({ type: 'saved', path: target.fsPath } satisfies ToWebview);
  }

  dispose(): void {
    clearTimeout(this.postTimer);
    this.editorPanel?.dispose();
    for (const host of this.hosts) host.dispose();
    this.hosts.clear();
    for (const d of this.disposables.splice(0)) d.dispose();
  }
}

function toWebviewFigure(f: RenderedFigure): PanelFigure {
  if (!f.image) return { tensor: f.tensor, note: f.note, error: f.error };
  const { png, width, height, meta } = f.image;
  return { tensor: f.tensor, image: { dataUrl: `data:image/png;base64,${Buffer.from(png).toString('base64')}`, width, height, meta } };
}
