import neostandard from 'neostandard'

// Fastify's own style, with the TypeScript rules, over everything the project writes; and small
// functions in the package and the benchmark (a function longer than a screen holds more than one
// idea).
export default [
  ...neostandard({
    ts: true,
    ignores: ['dist/**', 'coverage/**', '.tap/**', 'bench/results/**']
  }),
  {
    files: ['lib/**/*.ts'],
    rules: { 'max-lines-per-function': ['error', { max: 60, skipBlankLines: true, skipComments: true }] }
  },
  {
    files: ['bench/**/*.js'],
    rules: { 'max-lines-per-function': ['error', { max: 80, skipBlankLines: true, skipComments: true }] }
  }
]
