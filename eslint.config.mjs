// Lint: TypeScript rules plus the import rules of CONVENTIONS (workflows import types only; no cycles).
import tseslint from 'typescript-eslint';
import importX from 'eslint-plugin-import-x';
import { builtinModules } from 'node:module';

const nodeBuiltins = [...builtinModules, ...builtinModules.map((m) => `node:${m}`)];
// The CLI's command modules (cli/<command>.ts): no module of cli/ imports one (main.ts loads them lazily).
const cliCommands = [
  'agent',
  'add-node',
  'bench',
  'ca',
  'ca-worker',
  'control-plane',
  'doctor',
  'engine-probe',
  'engine-shim',
  'gateway',
  'onboard',
  'provision-node',
  'proxmox-worker',
  'sim-engine',
  'ctl',
];
const contractOnly = {
  group: ['**/gateway/control/*', '!**/gateway/control/contract'],
  message: "import the control API's wire types from gateway/control/contract, not a route file",
};
const commandImports = {
  group: cliCommands.flatMap((c) => [`./${c}`, `../${c}`]),
  message:
    'a command does not import another command: move what both need into a helper module (cli/temporal.ts, node-input.ts, …)',
};

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
      'no-restricted-imports': [
        'error',
        {
          paths: nodeBuiltins.map((name) => ({
            name,
            message: 'workflows run in a deterministic sandbox: no Node built-ins',
          })),
          patterns: [
            {
              group: ['**/activities/**', '**/activities'],
              allowTypeImports: true,
              message: 'workflows import activity *types* only (import type …)',
            },
            {
              group: [
                'mysql2',
                'mysql2/*',
                'fastify',
                '@temporalio/client',
                '@temporalio/worker',
                '@temporalio/activity',
                '**/lib/store/**',
                '**/gateway/**',
                '**/cli/**',
                '**/workers/**',
              ],
              message: 'workflows must not do I/O: reach it through activities',
            },
          ],
        },
      ],
    },
  },
  {
    files: ['lib/**/*.ts', 'config/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: ['**/workers/**', '**/cli/**', '**/gateway/**', '**/activities/**', '**/workflows/**'],
              message:
                'lib/ and config/ are the bottom layer: imports flow entrypoints → gateway/cli/workers → workflows/activities → lib/config',
            },
          ],
        },
      ],
    },
  },
  {
    // gateway/ has one room per listener and trust model. The inference API (API keys) knows nothing of the control
    // API's or the door's internals; each mTLS room shares only the certificate gate (gateway/mtls.ts) and the
    // control API's wire types (gateway/control/contract.ts).
    files: ['gateway/inference/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: [
                '**/gateway/control/*',
                '../control/*',
                '!**/control/contract',
                '**/gateway/door/*',
                '../door/*',
                '../mtls',
              ],
              message: 'gateway/inference/ is its own room: only gateway/control/contract may be shared',
            },
          ],
        },
      ],
    },
  },
  {
    files: ['gateway/door/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: [
                '**/gateway/control/*',
                '../control/*',
                '!**/control/contract',
                '**/gateway/inference/*',
                '../inference/*',
              ],
              message:
                'gateway/door/ is its own room: it shares only the certificate gate (../mtls) and gateway/control/contract',
            },
          ],
        },
      ],
    },
  },
  {
    files: ['gateway/node-door/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: [
                '**/gateway/control/*',
                '../control/*',
                '!**/control/contract',
                '**/gateway/inference/*',
                '../inference/*',
                '**/gateway/door/*',
                '../door/*',
              ],
              message:
                "gateway/node-door/ (a node's inference door) is its own room: it shares only the certificate gate (../mtls)",
            },
          ],
        },
      ],
    },
  },
  {
    files: ['gateway/control/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: ['**/gateway/door/*', '../door/*', '**/gateway/inference/*', '../inference/*'],
              message: 'gateway/control/ is its own room: it shares only the certificate gate (../mtls)',
            },
          ],
        },
      ],
    },
  },
  {
    // Outside gateway/, the control API is reached through its wire types, never a route file.
    files: ['workers/agent/**/*.ts', 'activities/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', { patterns: [contractOnly] }],
    },
  },
  {
    // A CLI command never imports another command: what two share lives in a helper module of its own.
    files: ['cli/**/*.ts'],
    ignores: ['cli/main.ts', 'cli/release-main.ts', 'cli/ctl/index.ts'],
    rules: {
      'no-restricted-imports': ['error', { patterns: [commandImports, contractOnly] }],
    },
  },
  {
    // A ctl verb imports only the verbs' shared helpers (verb.ts, deployment.ts, views/), never another verb.
    files: ['cli/ctl/*.ts'],
    ignores: ['cli/ctl/index.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            commandImports,
            contractOnly,
            {
              group: ['./*', '!./verb', '!./deployment', '!./views'],
              message: 'a ctl verb does not import another verb: shared code goes in verb.ts, deployment.ts or views/',
            },
          ],
        },
      ],
    },
  },
);
