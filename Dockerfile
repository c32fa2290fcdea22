# syntax=docker/dockerfile:1
# Build stage: compile TypeScript and the better-sqlite3 addon, then drop dev dependencies.
FROM node:20-bookworm-slim AS build
WORKDIR /app
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 make g++ \
 && rm -rf /var/lib/apt/lists/*
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY migrations ./migrations
COPY dashboard ./dashboard
RUN npm run build && npm prune --omit=dev

# Runtime stage: production dependencies and compiled code only, as the unprivileged `node` user.
FROM node:20-bookworm-slim
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=8080 \
    SQLITE_PATH=/data/rollcall.sqlite
WORKDIR /app
COPY --from=build /app/package.json ./package.json
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY --from=build /app/dashboard ./dashboard
# `rollcall migrate` (and the rest of the CLI) on the PATH: npm scripts would rebuild, and tsc is pruned.
RUN mkdir -p /data && chown node:node /data \
 && chmod +x dist/src/cli/index.js && ln -s /app/dist/src/cli/index.js /usr/local/bin/rollcall
USER node
VOLUME ["/data"]
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + process.env.PORT + '/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# The same command `npm start` runs after its build step. SIGTERM drains requests and closes the pool.
CMD ["node", "--max-semi-space-size=8", "dist/src/main.js"]
