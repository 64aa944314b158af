// ESLint for the extension: the host (Node + VS Code API), the webview (DOM only) and the unit tests,
// each read with its own tsconfig so type-aware rules see the same world the compiler checks.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

const typed = (files, project) => ({
  files,
  languageOptions: { parserOptions: { project, tsconfigRootDir: root } },
});

export default tseslint.config(
  { basePath: root },
  { ignores: ['extension/src/protocol/messages.gen.ts', 'dist/**', 'out/**', 'node_modules/**', '.e2e/**', 'bundled/**'] },
  {
    files: ['extension/src/**/*.ts', 'extension/webview/**/*.ts', 'tests/extension/**/*.ts'],
    extends: [js.configs.recommended, ...tseslint.configs.recommendedTypeChecked],
    rules: {
      // Unused names are the compiler's job (noUnusedLocals); `_`-prefixed parameters are deliberate.
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
    },
  },
  typed(['extension/src/**/*.ts'], 'extension/tsconfig.host.json'),
  typed(['extension/webview/**/*.ts'], 'extension/webview/tsconfig.json'),
  typed(['tests/extension/**/*.ts'], 'extension/tsconfig.json'),
  {
    files: ['tests/extension/**/*.ts'],
    // A test's fake of an async API is `async` so that a throw becomes a rejection, as in the real one.
    rules: { '@typescript-eslint/require-await': 'off' },
  },
);
