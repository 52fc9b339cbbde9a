// Lint: TypeScript rules plus the import rules of CONVENTIONS (workflows import types only; no cycles).
import tseslint from 'typescript-eslint';
import importX from 'eslint-plugin-import-x';
import { builtinModules } from 'node:module';

const nodeBuiltins = [...builtinModules, ...builtinModules.map((m) => `node:${m}`)];

export default tseslint.config(
  { ignores: ['node_modules/**', '.tools/**', '.llmgw/**', 'dist/**', 'coverage/**', 'bin/**', '*.config.js'] },
  ...tseslint.configs.recommended,
  {
    files: ['**/*.ts'],
    plugins: { 'import-x': importX },
    settings: { 'import-x/resolver-next': [importX.createNodeResolver({ extensions: ['.ts', '.js', '.json'] })] },
    rules: {
      'import-x/no-cycle': ['error', { maxDepth: 10 }],
      'import-x/no-self-import': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': ['error', { fixStyle: 'inline-type-imports' }],
    },
  },
  {
    // Workflow code is bundled into Temporal's sandbox: no Node built-ins, no activity code, no I/O libraries.
    files: ['workflows/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', {
        paths: nodeBuiltins.map((name) => ({ name, message: 'workflows run in a deterministic sandbox: no Node built-ins' })),
        patterns: [
          { group: ['**/activities/**', '**/activities'], allowTypeImports: true, message: 'workflows import activity *types* only (import type …)' },
          { group: ['mysql2', 'mysql2/*', 'fastify', '@temporalio/client', '@temporalio/worker', '@temporalio/activity', '**/lib/store/**', '**/gateway/**', '**/cli/**', '**/workers/**'], message: 'workflows must not do I/O: reach it through activities' },
        ],
      }],
    },
  },
  {
    files: ['lib/**/*.ts', 'config/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', { patterns: [
        { group: ['**/workers/**', '**/cli/**', '**/gateway/**', '**/activities/**', '**/workflows/**'], message: 'lib/ and config/ are the bottom layer: imports flow entrypoints → gateway/cli/workers → workflows/activities → lib/config' },
      ] }],
    },
  },
);
