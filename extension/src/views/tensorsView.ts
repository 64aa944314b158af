// The "Tensors" webview view: hosts dist/webview.js under a strict CSP (nonce, cspSource,
// data: images only), forwards the panel's view model at a readable rate, answers render
// requests with PNG data URLs, saves images, and routes intervention actions.

import { randomBytes } from 'node:crypto';
import * as vscode from 'vscode';
import type { ExtensionLog } from '../common/log';
import { Commands, Views } from '../constants';
import type { FromWebview, ToWebview } from '../protocol/webview';
import { isInspectFromWebview, type InspectFromWebview, type InspectToWebview } from './inspectProtocol';
import type { PanelController } from './panelController';

/** Live updates reach the webview at most this often (people cannot read faster). */
const POST_INTERVAL_MS = 100;

export class TensorsViewProvider implements vscode.WebviewViewProvider, vscode.Disposable {
  static readonly viewType = Views.tensors;
  private view: vscode.WebviewView | undefined;
  private ready = false;
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
    this.ready = false;
    const dist = vscode.Uri.joinPath(this.extensionUri, 'dist');
    view.webview.options = { enableScripts: true, localResourceRoots: [dist] };
    view.webview.html = this.html(view.webview, dist);
    this.disposables.push(
      view.webview.onDidReceiveMessage((m: FromWebview | InspectFromWebview) => void this.onMessage(m)),
      view.onDidDispose(() => {
        if (this.view === view) this.view = undefined;
      }),
      view.onDidChangeVisibility(() => {
        if (view.visible) this.schedulePost();
      }),
    );
  }

  /** Show the view without taking the keyboard focus (on a hit, or from the command). */
  async reveal(): Promise<void> {
    if (this.view) {
      this.view.show(true);
    } else {
      await vscode.commands.executeCommand(`${Views.tensors}.focus`);
    }
  }

  private html(webview: vscode.Webview, dist: vscode.Uri): string {
    const nonce = randomBytes(16).toString('base64');
    const script = webview.asWebviewUri(vscode.Uri.joinPath(dist, 'webview.js'));
    const style = webview.asWebviewUri(vscode.Uri.joinPath(dist, 'webview.css'));
    const csp = [
      "default-src 'none'",
      `img-src ${webview.cspSource} data:`,
      `style-src ${webview.cspSource}`,
      `font-src ${webview.cspSource}`,
      `script-src 'nonce-${nonce}'`,
    ].join('; ');
    return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<link href="${style}" rel="stylesheet">
<title>Tensors</title>
</head>
<body>
<div id="root" data-testid="tensors-root"></div>
<script nonce="${nonce}" src="${script}"></script>
</body>
</html>`;
  }

  private schedulePost(): void {
    if (this.postTimer) return;
    const wait = Math.max(0, POST_INTERVAL_MS - (Date.now() - this.lastPost));
    this.postTimer = setTimeout(() => {
      this.postTimer = undefined;
      this.postView();
    }, wait);
  }

  private postView(): void {
    if (!this.view || !this.ready) return;
    this.lastPost = Date.now();
    void this.post({ type: 'view', view: this.panel.view });
  }

  private post(message: ToWebview | InspectToWebview): Thenable<boolean> {
    return this.view ? this.view.webview.postMessage(message) : Promise.resolve(false);
  }

  setInspectHandler(handler: (message: InspectFromWebview) => Promise<void>): void {
    this.inspectHandler = handler;
  }

  /** A message for the "Inspect" section (dropped while the view is not loaded: "Show" reveals it first). */
  async postInspect(message: InspectToWebview): Promise<boolean> {
    for (let waited = 0; !this.ready && waited < 5000; waited += 50) await new Promise((r) => setTimeout(r, 50));
    return this.post(message);
  }

  private async onMessage(message: FromWebview | InspectFromWebview): Promise<void> {
    try {
      if (isInspectFromWebview(message)) {
        await this.inspectHandler?.(message);
        return;
      }
      switch (message.type) {
        case 'ready':
          this.ready = true;
          this.log.event('panel.ready', {});
          this.postView();
          return;
        case 'render': {
          try {
            const image = await this.panel.render(message.visual, message.options);
            const dataUrl = `data:image/png;base64,${Buffer.from(image.png).toString('base64')}`;
            await this.post({ type: 'image', seq: message.seq, visual: message.visual, dataUrl, width: image.width, height: image.height, meta: image.meta });
          } catch (err) {
            this.log.event('render.failed', { visual: message.visual, message: (err as Error).message });
            await this.post({ type: 'imageError', seq: message.seq, visual: message.visual, message: (err as Error).message });
          }
          return;
        }
        case 'savePng':
          await this.saveImage();
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
      }
    } catch (err) {
      void vscode.window.showErrorMessage(`Hookscope: ${(err as Error).message}`);
    }
  }

  private async saveImage(): Promise<void> {
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
    await this.post({ type: 'saved', path: target.fsPath });
  }

  dispose(): void {
    clearTimeout(this.postTimer);
    for (const d of this.disposables.splice(0)) d.dispose();
  }
}
