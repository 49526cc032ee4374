// A minimal event emitter with VS Code's shape (`event(listener) → { dispose }`), so that the
// modules that must stay free of `vscode` (the model sync) can still offer events.

export interface Disposable {
  dispose(): void;
}

export type Event<T> = (listener: (value: T) => void) => Disposable;

export class Emitter<T> implements Disposable {
  private listeners: Array<(value: T) => void> = [];

  readonly event: Event<T> = (listener) => {
    this.listeners.push(listener);
    return { dispose: () => (this.listeners = this.listeners.filter((l) => l !== listener)) };
  };

  fire(value: T): void {
    for (const listener of [...this.listeners]) listener(value);
  }

  dispose(): void {
    this.listeners = [];
  }
}
