/**
 * Unit, integration and e2e tests share one config; integration tests bring their own servers. The llama suites
 * (test/integration/llama-*.test.ts) need this machine's llama.cpp build, which set-up starts in the background
 * (scripts/llama-cpp.sh, ~6 min of two cores the first time): they wait for it, bounded (docs/development.md).
 */
const maxWorkers = 2;
// test/helpers/ports.ts gives each worker engine port ranges of its own, by JEST_WORKER_ID modulo this count.
process.env.LLMGW_JEST_WORKERS ??= String(maxWorkers);

module.exports = {
  testEnvironment: 'node',
  transform: { '^.+\\.ts$': 'ts-jest' },
  testMatch: ['<rootDir>/test/**/*.test.ts'],
  // test/faults saturates both cores on purpose: it runs alone, after the rest (scripts/test.sh sets LLMGW_FAULTS=1).
  testPathIgnorePatterns: ['/node_modules/', ...(process.env.LLMGW_FAULTS ? [] : ['/test/faults/'])],
  testTimeout: 120000,
  maxWorkers,
  setupFiles: ['<rootDir>/test/setup.ts'],
};
