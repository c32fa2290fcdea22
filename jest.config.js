/** @type {import('jest').Config} */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  // Transpile only: `npm run typecheck` (tsc) checks types, once, for the whole project.
  transform: { '^.+\\.ts$': ['ts-jest', { isolatedModules: true }] },
  testTimeout: 60000,
  globalSetup: '<rootDir>/test/globalSetup.js',
  // Each API test file gets its own database; files run in parallel on two cores.
  maxWorkers: 2,
};
