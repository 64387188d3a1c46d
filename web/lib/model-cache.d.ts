// Types of model-cache.mjs: models in the Origin Private File System.

export const DEFAULT_FILES: string[];
export const OPTIONAL_FILES: string[];

export interface CachedModel {
  name: string;
  url: string;
  bytes: number;
  complete: boolean;
  files: Array<{ name: string; size?: number; bytes: number; done: boolean }>;
}

/** Downloads or resumes (HTTP Range) a model's files; verifies sizes and the SHA-256 given. */
export function download(name: string, url: string | URL, options?: {
  files?: string[];
  optional?: string[];
  expect?: Record<string, { size?: number; sha256?: string }>;
  onProgress?: (p: { name: string; file: string; loaded: number; total?: number }) => void;
  signal?: AbortSignal;
}): Promise<object>;
export function list(): Promise<CachedModel[]>;
/** A complete model's files, for loadEngine({model}). */
export function files(name: string): Promise<File[]>;
export function remove(name: string): Promise<void>;
export function estimate(): Promise<{ usage: number; quota: number; persisted: boolean }>;

/** Incremental SHA-256 (SubtleCrypto has none). */
export class Sha256 {
  update(bytes: Uint8Array): this;
  hex(): string;
}
