// Compiles the dashboard's browser script once before the tests (the service serves it).
const { execFileSync } = require('node:child_process');
const path = require('node:path');

module.exports = async () => {
  const root = path.resolve(__dirname, '..');
  execFileSync(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', 'dashboard/tsconfig.json'], { cwd: root, stdio: 'inherit' });
};
