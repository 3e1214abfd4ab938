// Key Vault for the app's secrets: the webhook HMAC secret and, when given, the alert webhook URL
// (chat webhook URLs carry their own token) and the Azure OpenAI key. The function app reads them through Key Vault
// references resolved with its user-assigned identity (Key Vault Secrets User, rbac.bicep), so no
// secret value is stored in the app's configuration, in this repository or in deployment outputs.
// To rotate the webhook secret, set the secret to "new,old" (the ingress accepts a comma-separated
// list), then later to "new"; the app picks up a new version within 24 hours or on restart.

param location string
param tags object

@description('Vault name: 3-24 letters, digits and single hyphens, starting with a letter, globally unique.')
@minLength(3)
@maxLength(24)
param name string

@secure()
@description('Value of the webhook-secret secret (WEBHOOK_SECRET).')
param webhookSecret string

@secure()
@description('Value of the alert-webhook-url secret (ALERT_WEBHOOK_URL); empty: no secret is created.')
param alertWebhookUrl string = ''

@secure()
@description('Value of the openai-api-key secret (AZURE_OPENAI_API_KEY); empty: no secret is created (identity auth).')
param openAIApiKey string = ''

@description('Purge protection cannot be turned off once on; it keeps a deleted vault recoverable for the retention period.')
param enablePurgeProtection bool = true

@description('Public network access to Key Vault: Disabled once the app reaches it over a private endpoint (see docs/design.md#threats).')
@allowed([
  'Enabled'
  'Disabled'
])
param publicNetworkAccess string = 'Enabled'

resource vault 'Microsoft.KeyVault/vaults@2023-07-01' = {
  // checkov:skip=CKV_AZURE_110: purge protection is on by default (keyVaultPurgeProtection); a parameter so a throwaway environment can leave it off
  // checkov:skip=CKV_AZURE_42: soft delete is always on (90 days) and purge protection on by default; the check cannot read the parameter
  // checkov:skip=CKV_AZURE_189: public network access is the parameter publicNetworkAccess (main.bicep: keyVaultPublicNetworkAccess), Enabled by default because this template creates no VNet or private endpoints; Disabled with them
  // checkov:skip=CKV_AZURE_109: RBAC authorization only; firewall rules belong with a private endpoint, the parameter keyVaultPublicNetworkAccess
  name: name
  location: location
  tags: tags
  properties: {
    tenantId: tenant().tenantId
    sku: {
      family: 'A'
      name: 'standard'
    }
    enableRbacAuthorization: true
    enableSoftDelete: true
    softDeleteRetentionInDays: 90
    // The API refuses false once it is true, so "off" is expressed by leaving the property out.
    enablePurgeProtection: enablePurgeProtection ? true : null
    publicNetworkAccess: publicNetworkAccess
  }
}

resource webhookSecretResource 'Microsoft.KeyVault/vaults/secrets@2023-07-01' = {
  parent: vault
  // checkov:skip=CKV_AZURE_41: an expiry would stop the app accepting webhooks on that date; the secret is rotated on purpose ("new,old", README)
  name: 'webhook-secret'
  properties: {
    value: webhookSecret
    contentType: 'text/plain'
  }
}

resource alertWebhookUrlResource 'Microsoft.KeyVault/vaults/secrets@2023-07-01' = if (!empty(alertWebhookUrl)) {
  parent: vault
  // checkov:skip=CKV_AZURE_41: an expiry would silence every alert on that date; the URL changes when its owner rotates it
  // checkov:skip=CKV_AZURE_114: contentType is set below (text/uri-list); the check does not read conditional resources
  name: 'alert-webhook-url'
  properties: {
    value: alertWebhookUrl
    contentType: 'text/uri-list'
  }
}

resource openAIApiKeyResource 'Microsoft.KeyVault/vaults/secrets@2023-07-01' = if (!empty(openAIApiKey)) {
  parent: vault
  // checkov:skip=CKV_AZURE_41: an expiry would stop every model call on that date; the key is rotated with the Azure OpenAI resource
  // checkov:skip=CKV_AZURE_114: contentType is set below (text/plain); the check does not read conditional resources
  name: 'openai-api-key'
  properties: {
    value: openAIApiKey
    contentType: 'text/plain'
  }
}

output name string = vault.name
output id string = vault.id
// Versionless URIs (vaultUri ends with '/'): a Key Vault reference to one follows the secret's latest
// version. Built from the vault, so no output reads a secret resource that may not be deployed.
output webhookSecretUri string = '${vault.properties.vaultUri}secrets/${webhookSecretResource.name}'
output alertWebhookUrlSecretUri string = empty(alertWebhookUrl) ? '' : '${vault.properties.vaultUri}secrets/alert-webhook-url'
output openAIApiKeySecretUri string = empty(openAIApiKey) ? '' : '${vault.properties.vaultUri}secrets/openai-api-key'
