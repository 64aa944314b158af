// One webview showing the Tensors panel: the side bar's view or the editor-area panel. Loads
// dist/webview.js under a strict CSP (nonce, cspSource, data: images only), knows when the
// page is ready, and hands its messages to the provider (tensorsView.ts), which keeps every
// open webview showing the same state.

import { randomBytes } from 'node:crypto';
import * as vscode from 'vscode';
import type { FromWebview, ToWebview } from '../protocol/webview';
import type { InspectFromWebview, InspectToWebview } from './inspectProtocol';

/** Where the panel is shown: the side bar's view, or a panel in the editor area (a wide view). */
export type TensorsHostKind = 'side' | 'editor';

export class TensorsWebview implements vscode.Disposable {
  ready = false;
  private readonly disposables: vscode.Disposable[] = [];

  constructor(
    readonly kind: TensorsHostKind,
    readonly webview: vscode.Webview,
    extensionUri: vscode.Uri,
    onMessage: (host: TensorsWebview, message: FromWebview | InspectFromWebview) => void,
    private readonly isVisible: () => boolean,
  ) {
    const dist = vscode.Uri.joinPath(extensionUri, 'dist');
    webview.options = { enableScripts: true, localResourceRoots: [dist] };
    webview.html = html(webview, dist, kind);
    this.disposables.push(webview.onDidReceiveMessage((m: FromWebview | InspectFromWebview) => {
      if ((m as FromWebview).type === 'ready') this.ready = true;
      onMessage(this, m);
    }));
  }

  /** Loaded and on screen: worth sending the view to. */
  get showing(): boolean {
    return this.ready && this.isVisible();
  }

  post(message: ToWebview | InspectToWebview): Thenable<boolean> {
    return this.webview.postMessage(message);
  }

  dispose(): void {
    for (const d of this.disposables.splice(0)) d.dispose();
  }
}

function html(webview: vscode.Webview, dist: vscode.Uri, kind: TensorsHostKind): string {
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
<link href="${style.toString()}" rel="stylesheet">
<title>Tensors</title>
</head>
<body data-host="${kind}">
<div id="root" data-testid="tensors-root"></div>
<script nonce="${nonce}" src="${script.toString()}"></script>
</body>
</html>`;
}
