/**
 * Unit, integration and e2e tests share one config; integration tests bring their own servers.
 * The real llama-server suite runs only with `npm run test:llama` (LLMGW_LLAMA=1): its llama.cpp build is ~25 CPU-minutes
 * once per machine, more than the whole CI budget on a fresh 2-core machine (docs/development.md).
 */
const llama = process.env.LLMGW_LLAMA === '1';
module.exports = {
  testEnvironment: 'node',
  transform: { '^.+\\.ts$': 'ts-jest' },
  testMatch: ['<rootDir>/test/**/*.test.ts'],
  testPathIgnorePatterns: llama ? ['/node_modules/'] : ['/node_modules/', '<rootDir>/test/integration/llama-server.test.ts', '<rootDir>/test/integration/llama-gateway.test.ts'],
  testTimeout: 120000,
  maxWorkers: 2,
  setupFiles: ['<rootDir>/test/setup.ts'],
};
