import neostandard from 'neostandard'

// Fastify's own style, with the TypeScript rules, over everything the project writes.
export default neostandard({
  ts: true,
  ignores: ['dist/**', 'coverage/**', '.tap/**', 'bench/results/**']
})
