/**
 * A small WHATWG Headers implementation installed as globalThis.Headers in the envd bundle. Node's own
 * Headers is a lazy getter that loads all of undici and compiles its llhttp WebAssembly the first time
 * it is touched (connect creates Headers for every RPC): about +6 MB of private memory per sandbox for
 * a feature envd never uses. Connect only needs the map-like part implemented here.
 */
type Init =
  Headers | Record<string, string | readonly string[]> | Iterable<readonly [string, string]> | undefined;

const normalize = (value: string) => String(value).replace(/^[\t\n\r ]+|[\t\n\r ]+$/g, '');

export class LeanHeaders {
  private readonly map = new Map<string, string[]>();

  constructor(init?: Init) {
    if (!init) return;
    if (Symbol.iterator in (init as object)) {
      // Arrays of pairs, and Headers objects (which iterate as pairs).
      for (const [k, v] of init as Iterable<readonly [string, string]>) this.append(k, v);
    } else {
      for (const [k, v] of Object.entries(init as Record<string, string | readonly string[]>)) {
        if (Array.isArray(v)) for (const x of v) this.append(k, x as string);
        else this.append(k, v as string);
      }
    }
  }

  append(name: string, value: string): void {
    const key = String(name).toLowerCase();
    const list = this.map.get(key);
    if (list) list.push(normalize(value));
    else this.map.set(key, [normalize(value)]);
  }

  set(name: string, value: string): void {
    this.map.set(String(name).toLowerCase(), [normalize(value)]);
  }

  get(name: string): string | null {
    const list = this.map.get(String(name).toLowerCase());
    return list ? list.join(', ') : null;
  }

  getSetCookie(): string[] {
    return [...(this.map.get('set-cookie') ?? [])];
  }

  has(name: string): boolean {
    return this.map.has(String(name).toLowerCase());
  }

  delete(name: string): void {
    this.map.delete(String(name).toLowerCase());
  }

  forEach(fn: (value: string, key: string, parent: LeanHeaders) => void, thisArg?: unknown): void {
    for (const [k, v] of this.entries()) fn.call(thisArg, v, k, this);
  }

  *entries(): IterableIterator<[string, string]> {
    for (const key of [...this.map.keys()].sort()) {
      const list = this.map.get(key)!;
      if (key === 'set-cookie') for (const v of list) yield [key, v];
      else yield [key, list.join(', ')];
    }
  }

  *keys(): IterableIterator<string> {
    for (const [k] of this.entries()) yield k;
  }

  *values(): IterableIterator<string> {
    for (const [, v] of this.entries()) yield v;
  }

  [Symbol.iterator](): IterableIterator<[string, string]> {
    return this.entries();
  }

  get [Symbol.toStringTag](): string {
    return 'Headers';
  }
}

/** Replaces Node's lazily loaded global Headers (call before the first RPC). */
export function installLeanHeaders(): void {
  Object.defineProperty(globalThis, 'Headers', {
    value: LeanHeaders,
    writable: true,
    configurable: true,
    enumerable: false,
  });
}
