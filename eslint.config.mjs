// The TypeScript and JavaScript linter: neostandard (standard's rules for
// ESLint 9, typescript-eslint included), which is the style the code is
// written in: no semicolons, two spaces, single quotes, a space before a
// function's parentheses. Run: npm run lint.
import neostandard, { resolveIgnoresFromGitignore } from 'neostandard'

export default [
  ...neostandard({
    ts: true,
    env: ['node'],
    ignores: [...resolveIgnoresFromGitignore(), 'src/cluster/generated/**', 'bench/results/**']
  }),
  {
    rules: {
      // The gRPC loader's generated message types are named Message__Output.
      camelcase: ['error', { allow: ['__Output$'], properties: 'never' }],
      // `void promise` marks a promise deliberately not awaited (its errors are handled where it is made).
      'no-void': ['error', { allowAsStatement: true }],
      // FUSE callbacks take an errno (a number, 0 for success) first, not an Error.
      'n/no-callback-literal': 'off'
    }
  }
]
