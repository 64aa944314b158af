// A base class that owns disposables and releases them together (STYLE.md: disposables everywhere).

import type * as vscode from 'vscode';

export abstract class DisposableBase implements vscode.Disposable {
  private readonly owned: { dispose(): unknown }[] = [];
  private disposed = false;

  protected register<T extends { dispose(): unknown }>(disposable: T): T {
    if (this.disposed) disposable.dispose();
    else this.owned.push(disposable);
    return disposable;
  }

  get isDisposed(): boolean {
    return this.disposed;
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    for (const d of this.owned.splice(0).reverse()) {
      try {
        d.dispose();
      } catch (err) {
        console.error('[hookscope] dispose failed', err);
      }
    }
  }
}
