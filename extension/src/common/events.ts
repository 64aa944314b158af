// A tiny typed event emitter shaped like vscode.Event, for the modules that must not import `vscode`.

export interface Disposable {
  dispose(): void;
}

export type Event<T> = (listener: (value: T) => void) => Disposable;

export class Emitter<T> {
  private listeners = new Set<(value: T) => void>();

  readonly event: Event<T> = (listener) => {
    this.listeners.add(listener);
    return { dispose: () => this.listeners.delete(listener) };
  };

  /** Calls every listener; one that throws does not stop the others. */
  fire(value: T): void {
    for (const listener of [...this.listeners]) {
      try {
        listener(value);
      } catch (err) {
        console.error('[hookscope] event listener failed', err);
      }
    }
  }

  dispose(): void {
    this.listeners.clear();
  }
}

/** Resolves when `event` fires with a value that satisfies `predicate`, or rejects after `timeoutMs`. */
export function waitFor<T>(event: Event<T>, predicate: (value: T) => boolean, timeoutMs: number, what: string): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      sub.dispose();
      reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`));
    }, timeoutMs);
    const sub = event((value) => {
      if (!predicate(value)) return;
      clearTimeout(timer);
      sub.dispose();
      resolve(value);
    });
  });
}
