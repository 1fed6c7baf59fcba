// `hookstream operators create|list|revoke` (issue 19): the people who sign in to the console. The key is
// printed once, by create, and kept only as its sha256; creating and revoking are audited as the CLI's
// operator (--operator / HOOKSTREAM_OPERATOR).
import { AUDIT_OK, AuditAction, recordAudit } from '../../audit/store.ts';
import { createOperator, isOperatorName, listOperators, OPERATOR_NAME_RULE, revokeOperator } from '../../operators/store.ts';
import { requireString, table, UsageError, type Command } from '../command.ts';
import { cliOperator, withDatabase } from '../context.ts';

export const operatorsCreate: Command = {
  name: 'operators create',
  summary: 'Create a console operator; prints the operator key once',
  help: [
    'Options:',
    `  --name NAME   who the operator is, as the audit log shows it (${OPERATOR_NAME_RULE}); never reused`,
    '',
    'The key (hs_op_…) is shown only now: the operator signs in to the console with it ("Operator key").',
  ].join('\n'),
  options: { name: { type: 'string' } },
  async run({ values, out }) {
    const name = requireString(values, 'name');
    if (!isOperatorName(name)) throw new UsageError(`--name must be ${OPERATOR_NAME_RULE}`);
    const by = cliOperator();
    const created = await withDatabase((em) => em.transactional(async (tx) => {
      const c = await createOperator(tx, name);
      await recordAudit(tx, { operator: by, action: AuditAction.OperatorCreate, target: c.id, outcome: AUDIT_OK, detail: `name ${name}` });
      return c;
    }));
    out.data(created, () => `created operator ${created.name} (${created.id})\n  key: ${created.key}   (shown once)`);
  },
};

export const operatorsList: Command = {
  name: 'operators list',
  summary: 'List console operators (never their keys)',
  help: 'Revoked operators are listed with the time they were revoked.',
  async run({ out }) {
    const ops = await withDatabase((em) => listOperators(em));
    out.data(ops, () => ops.length === 0
      ? 'no operators (create one with: hookstream operators create --name NAME)'
      : table(['ID', 'NAME', 'PREFIX', 'CREATED', 'REVOKED'], ops.map((o) => [o.id, o.name, `${o.prefix}…`, o.created_at, o.revoked_at])));
  },
};

export const operatorsRevoke: Command = {
  name: 'operators revoke',
  summary: "Revoke an operator: the key stops working and the operator's console sessions end",
  help: 'Arguments:\n  ID_OR_NAME   the operator id (op_…) or name from operators list\n\nRevoking a revoked operator changes nothing.',
  positionals: { min: 1, max: 1, names: 'ID_OR_NAME' },
  async run({ positionals, out }) {
    const by = cliOperator();
    const revoked = await withDatabase((em) => em.transactional(async (tx) => {
      const r = await revokeOperator(tx, positionals[0]!);
      await recordAudit(tx, { operator: by, action: AuditAction.OperatorRevoke, target: r.id, outcome: AUDIT_OK, detail: `name ${r.name}` });
      return r;
    }));
    out.data(revoked, () => `revoked operator ${revoked.name} (${revoked.id}) at ${revoked.revoked_at}`);
  },
};
