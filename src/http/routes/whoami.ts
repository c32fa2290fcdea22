import { Router } from 'express';

/**
 * GET /v1/whoami: the tenant and scopes of the token in use (every scope without tokens), so a page
 * can offer only what the token may do (the dashboard's cancel button needs produce).
 */
export function whoamiRoutes(): Router {
  const router = Router();
  router.get('/v1/whoami', (req, res) => {
    res.json({ tenant: req.caller.tenant, scopes: [...req.scopes].sort() });
  });
  return router;
}
